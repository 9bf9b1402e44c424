"""reverb_py._gc.paused: the collector is off inside and as it was afterwards."""

from __future__ import annotations

import gc

import pytest

from reverb_py import _gc


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_restores_the_collector_state(enabled: bool) -> None:
    was_enabled = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        with _gc.paused():
            assert not gc.isenabled()
        assert gc.isenabled() == enabled
        with pytest.raises(KeyError), _gc.paused():
            raise KeyError("inside")
        assert gc.isenabled() == enabled
    finally:
        gc.enable() if was_enabled else gc.disable()
