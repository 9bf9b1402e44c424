"""Tests in headless Chromium (``make test-browser``, which sets
``REVERB_PY_BROWSER_TESTS``); every other run does not collect this folder."""
