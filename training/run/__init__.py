"""The run machinery: run folders and model loading, atomic writes, data, callbacks, the session."""
