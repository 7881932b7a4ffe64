"""response_format and tools as llama.cpp grammars (GBNF), from JSON schemas and regexes."""
