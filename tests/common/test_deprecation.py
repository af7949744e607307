"""The three deprecation helpers warn, name the new spelling, and pass the call on unchanged."""

import sys
import types

import pytest

from common.deprecation import deprecated_method, moved_attributes, renamed_arguments
from common.errors import ConfigurationError


class _Barostat:
    @renamed_arguments(frequency="every")
    def __init__(self, pressure, every=25):
        self.pressure, self.every = pressure, every

    def energy_and_forces(self, scale):
        return ("energy", scale)

    force = deprecated_method("energy_and_forces")


def test_renamed_argument_warns_and_is_passed_on():
    with pytest.warns(DeprecationWarning, match=r"frequency=.*every="):
        barostat = _Barostat(1.0, frequency=7)
    assert barostat.every == 7


def test_new_argument_does_not_warn(recwarn):
    assert _Barostat(1.0, every=3).every == 3
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_both_spellings_are_refused():
    with pytest.raises(ConfigurationError, match="every= only"):
        _Barostat(1.0, every=3, frequency=4)


def test_deprecated_method_warns_with_its_own_name():
    with pytest.warns(DeprecationWarning, match=r"_Barostat\.force is deprecated.*energy_and_forces"):
        assert _Barostat(1.0).force(2) == ("energy", 2)
    assert _Barostat.force.__qualname__ == "_Barostat.force"


def test_moved_attribute_warns_and_returns_the_new_object(monkeypatch):
    old = types.ModuleType("old_place")
    old.__getattr__ = moved_attributes("old_place", {"load": "common.deprecation:renamed_arguments"})
    monkeypatch.setitem(sys.modules, "old_place", old)
    with pytest.warns(DeprecationWarning, match=r"old_place\.load is deprecated.*common\.deprecation"):
        assert old.load is renamed_arguments
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        old.missing  # noqa: B018
