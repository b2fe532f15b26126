"""The generator of `contracts/` (AsyncAPI and JSON Schemas) from the models, for `rota contracts`.

It lives above the contracts because FastStream declares the channels; the models themselves
(`rota.contracts`) need pydantic alone.
"""
