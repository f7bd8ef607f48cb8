// liblmhead.so is the whole of lmhead_core (linked whole-archive); a target needs one source.
