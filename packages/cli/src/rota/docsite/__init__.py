"""The documentation site: reference pages generated from the code, and the MkDocs hook."""
