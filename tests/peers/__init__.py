"""Test peers: servers the provider tests talk to over loopback HTTP (llmock comes from its own
pytest plugin; aimock is an npm package installed under ``tests/peers/node_modules``), plus a
scripted raw-socket HTTP server and stream helpers."""
