"""Tests of common.config: TOML -> dataclasses, errors naming file, line, table and key."""

import dataclasses
import enum
import json
import math
import pathlib
from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest
import tomllib

from common import config
from common.config import ConfigError


class Polarisation(enum.Enum):
    TE = "te"
    TM = "tm"


@dataclass
class Waveform:
    f0: float
    fwidth: float = 1e9


@dataclass
class Source:
    position: tuple[float, float]
    component: Literal["Ex", "Ey", "Ez"] = "Ez"
    waveform: Waveform = field(default_factory=lambda: Waveform(f0=1e9))


@dataclass
class Grid:
    name: str
    size: tuple[float, ...]
    resolution: float = 1e-5
    pml: int = 10

    def __post_init__(self):
        if self.resolution <= 0:
            raise ValueError(f"resolution must be positive, got {self.resolution}")


@dataclass
class Run:
    grid: Grid
    solver: Literal["fdtd", "fdfd"] = "fdtd"
    polarisation: Polarisation = Polarisation.TM
    output: pathlib.Path = pathlib.Path("out")
    seed: Optional[int] = None  # noqa: UP045  (checks that typing.Optional works as well as `| None`)
    until: float | None = None
    tags: list[str] = field(default_factory=list)
    options: dict[str, float] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)
    verbose: bool = False


GOOD = """\
# a run
solver = "fdfd"
polarisation = "te"
output = "results/run1"
seed = 7
tags = ["a", "b"]
verbose = true

[grid]
name = "box"
size = [1, 2.5e-3]
resolution = 2e-6

[options]
courant = 0.5
relax = 1

[[sources]]
position = [0, 0]

[[sources]]
position = [1.0, -1.0]
component = "Ex"

[sources.waveform]
f0 = 3e9
"""


def test_load_good_file_maps_tables_defaults_and_types(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(GOOD)
    run = config.load(path, Run)
    assert run.solver == "fdfd"
    assert run.polarisation is Polarisation.TE
    assert run.output == pathlib.Path("results/run1")
    assert run.seed == 7 and run.until is None and run.verbose is True
    assert run.tags == ["a", "b"]
    assert run.grid == Grid(name="box", size=(1.0, 2.5e-3), resolution=2e-6, pml=10)
    assert isinstance(run.grid.size[0], float)  # int accepted where float expected, converted
    assert run.options == {"courant": 0.5, "relax": 1.0} and isinstance(run.options["relax"], float)
    assert run.sources == [
        Source(position=(0.0, 0.0)),
        Source(position=(1.0, -1.0), component="Ex", waveform=Waveform(f0=3e9)),
    ]
    # a str path works as well as a Path
    assert config.load(str(path), Run) == run


def test_round_trip_through_toml_and_json(tmp_path):
    run = config.loads(GOOD, Run)
    text = config.dumps(run)
    assert config.loads(text, Run) == run
    config.dump(run, tmp_path / "again.toml")
    assert config.load(tmp_path / "again.toml", Run) == run
    plain = config.to_dict(run)
    assert json.loads(json.dumps(plain)) == plain
    assert plain["grid"]["size"] == [1.0, 2.5e-3] and plain["polarisation"] == "te"
    assert plain["seed"] == 7 and plain["until"] is None
    assert config.from_dict(plain, Run) == run
    # a TOML reader of reference parses what we wrote to the same data, nulls left out
    assert tomllib.loads(text) == {key: value for key, value in plain.items() if value is not None}


def test_dumps_quotes_awkward_strings_and_keys_and_special_floats():
    data = {
        "plain": 'say "hi"\\ \n\t\x7f \u00e9',
        "with space": math.inf,
        "nan": math.nan,
        "nested": {"a.b": [1, 2.5, "x"], "inline": [{"k": 1}, 2]},
    }
    parsed = tomllib.loads(config.dumps(data))
    assert parsed["plain"] == data["plain"]
    assert parsed["with space"] == math.inf and math.isnan(parsed["nan"])
    assert parsed["nested"] == data["nested"]


def _error(text, schema=Run, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config.loads(text, schema, filename="run.toml", **kwargs)
    assert isinstance(info.value, ValueError)
    return info.value


def test_unknown_key_names_table_key_line_and_choices():
    text = '[grid]\nname = "box"\nsize = [1]\nnam = "oops"\n'
    error = _error(text)
    assert str(error).startswith("run.toml:4: [grid] key 'nam': unknown key")
    assert "expected one of name, size, resolution, pml" in str(error)
    assert "did you mean 'name'" in str(error)
    assert error.line == 4 and error.key_path == ("grid", "nam")


def test_unknown_top_level_key_and_unknown_table():
    error = _error('[grid]\nname = "a"\nsize = [1]\n\n[solvr]\nx = 1\n')
    assert str(error).startswith("run.toml:5: key 'solvr': unknown key (did you mean 'solver'?)")


def test_wrong_type_names_expected_and_got():
    error = _error('[grid]\nname = "box"\nsize = [1]\nresolution = "abc"\n')
    assert str(error) == "run.toml:4: [grid] key 'resolution': expected float, got str 'abc'"
    # bool is not an int even though Python says so
    error = _error('[grid]\nname = "box"\nsize = [1]\npml = true\n')
    assert "run.toml:4: [grid] key 'pml': expected int, got bool True" == str(error)
    # a float is not an int
    assert "expected int, got float 2.5" in str(_error('[grid]\nname = "b"\nsize = [1]\npml = 2.5\n'))


def test_wrong_type_inside_list_and_array_of_tables():
    error = _error('[grid]\nname = "box"\nsize = [1, "x", 3]\n')
    assert str(error) == "run.toml:3: [grid] key 'size[1]': expected float, got str 'x'"
    text = GOOD.replace('component = "Ex"', 'component = "Ex"\nposition2 = 1')
    error = _error(text)
    assert error.key_path == ("sources", 1, "position2")
    assert str(error).startswith("run.toml:24: [sources[1]] key 'position2': unknown key")
    text = GOOD.replace("f0 = 3e9", "f0 = [3e9]")
    error = _error(text)
    assert str(error).startswith("run.toml:26: [sources[1].waveform] key 'f0': expected float, got array")


def test_fixed_length_tuple():
    @dataclass
    class Point:
        position: tuple[float, float]

    with pytest.raises(
        ConfigError,
        match=r"<string>:1: key 'position': expected tuple\[float, float\] "
        r"with 2 items, got 3",
    ):
        config.loads("position = [1, 2, 3]", Point)


def test_missing_required_key_and_table():
    error = _error('[grid]\nname = "box"\n')
    assert str(error) == "run.toml:1: [grid] key 'size': missing required key of type tuple[float, ...]"
    error = _error('solver = "fdtd"\n')
    assert str(error) == "run.toml: key 'grid': missing required key of type table (Grid)"
    assert error.line is None


def test_literal_and_enum_choices():
    error = _error('solver = "fdtdx"\n[grid]\nname = "a"\nsize = [1]\n')
    assert str(error) == "run.toml:1: key 'solver': 'fdtdx' is not one of the choices 'fdtd', 'fdfd'"
    error = _error('polarisation = "xx"\n[grid]\nname = "a"\nsize = [1]\n')
    assert str(error) == "run.toml:1: key 'polarisation': 'xx' is not one of the choices 'te', 'tm'"
    # the enum member name works too
    assert (
        config.loads('polarisation = "TE"\n[grid]\nname = "a"\nsize = [1]\n', Run).polarisation
        is Polarisation.TE
    )


def test_table_where_scalar_expected_and_vice_versa():
    error = _error("grid = 3\n")
    assert str(error) == "run.toml:1: key 'grid': expected table (Grid), got int 3"
    error = _error('[grid]\nname = "a"\nsize = [1]\n[grid.resolution]\nx = 1\n')
    assert str(error) == "run.toml:4: [grid] key 'resolution': expected float, got table"


def test_post_init_value_error_reported_with_key_and_line():
    error = _error('[grid]\nname = "box"\nsize = [1]\nresolution = -1.0\n')
    assert str(error) == (
        "run.toml:4: [grid] key 'resolution': invalid value: resolution must be positive, got -1.0"
    )
    assert isinstance(error.__cause__, ValueError)


def test_syntax_error_reports_its_line():
    error = _error('solver = "fdtd"\n[grid]\nname = = "box"\n')
    assert error.line == 3
    assert str(error).startswith("run.toml:3: TOML syntax error: Invalid value")
    error = _error('[grid\nname = "x"\n')
    assert error.line == 1 and "TOML syntax error" in str(error)


def test_optional_union_alternatives():
    @dataclass
    class Choice:
        value: int | str
        limit: float | None = None

    assert config.loads("value = 3", Choice) == Choice(3)
    assert config.loads('value = "three"\nlimit = 2', Choice) == Choice("three", 2.0)
    with pytest.raises(ConfigError, match=r"<string>:1: key 'value': expected int \| str, got float 2.5"):
        config.loads("value = 2.5", Choice)
    with pytest.raises(ConfigError, match=r"<string>:2: key 'limit': expected float, got str 'x'"):
        config.loads('value = 1\nlimit = "x"', Choice)


def test_lines_found_with_dotted_quoted_keys_inline_tables_and_multiline_strings():
    @dataclass
    class Inner:
        depth: int = 0

    @dataclass
    class Outer:
        note: str = ""
        inner: Inner = field(default_factory=Inner)
        table: dict[str, int] = field(default_factory=dict)

    text = 'note = """\ninner = 1\n"""\n"table".a = 1\ntable.b = "x"\n'
    with pytest.raises(ConfigError) as info:
        config.loads(text, Outer)
    assert str(info.value) == "<string>:5: [table] key 'b': expected int, got str 'x'"
    text = 'inner = { depth = "deep" }\n'
    with pytest.raises(ConfigError, match=r"<string>:1: \[inner\] key 'depth': expected int"):
        config.loads(text, Outer)


def test_from_dict_errors_name_the_key_without_a_line():
    with pytest.raises(ConfigError, match=r"^<dict>: \[grid\] key 'size': missing required key"):
        config.from_dict({"grid": {"name": "x"}}, Run)


def test_bad_arguments():
    with pytest.raises(TypeError, match="schema must be a dataclass type"):
        config.loads("a = 1", dict)
    with pytest.raises(TypeError, match="schema must be a dataclass type"):
        config.loads("a = 1", Waveform(f0=1.0))
    with pytest.raises(FileNotFoundError, match="nothere.toml"):
        config.load("nothere.toml", Run)
    with pytest.raises(TypeError, match="to_dict: expected a dataclass instance"):
        config.to_dict({"a": 1})
    with pytest.raises(TypeError, match=r"dumps: x holds object"):
        config.dumps({"x": object()})
    assert dataclasses.is_dataclass(config.loads('[grid]\nname="a"\nsize=[1]', Run))


def test_union_of_tables_reports_the_alternative_that_got_furthest():
    @dataclass
    class Dipole:
        kind: Literal["dipole"]
        position: tuple[float, float]

    @dataclass
    class PlaneWave:
        kind: Literal["plane_wave"]
        direction: str = "+x"

    @dataclass
    class Sources:
        sources: list[Dipole | PlaneWave]

    text = '[[sources]]\nkind = "plane_wave"\n\n[[sources]]\nkind = "dipole"\nposition = [0, "a"]\n'
    with pytest.raises(ConfigError) as info:
        config.loads(text, Sources)
    assert str(info.value) == "<string>:6: [sources[1]] key 'position[1]': expected float, got str 'a'"
    loaded = config.loads(text.replace('"a"', "1"), Sources)
    assert loaded.sources == [PlaneWave("plane_wave"), Dipole("dipole", (0.0, 1.0))]
