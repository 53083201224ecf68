"""Reading source files into cleaned documents with a section tree."""
