"""Files the core needs, loaded at the edge: prompt texts (``prompts/``) and tiktoken's
encodings."""
