"""Multi-port S-parameters of lumped ports: one FDTD run per driven port.

``N`` :class:`~mindelec.fdtd.LumpedPort` objects on one structure (antennas, a circuit) make an ``N``-port
network. :class:`LumpedMultiport` runs the FDTD once per port: in run ``j`` port ``j`` drives (its source
on, a voltage ``V_s`` behind ``R0_j``), every other port stays passive, terminated in its own ``R0`` by its
resistor, and each port records its gap voltage ``V`` and its current ``I`` into the structure (the
current into the + terminal of what the port drives, :mod:`mindelec.fdtd.lumped`). With the power waves
(Kurokawa 1965) at port ``i`` in run ``j``::

    a_ij = (V_ij + R0_i I_ij) / (2 sqrt(R0_i)),    b_ij = (V_ij - R0_i I_ij) / (2 sqrt(R0_i)),

the S matrix is ``S = B A^-1`` and the impedance matrix ``Z = V I^-1`` per frequency (``A``, ``B``, ``V``,
``I`` the ``(N, N)`` matrices of the runs' spectra). A terminated port's ``a`` is zero only up to the
discretisation of its resistor; inverting ``A`` uses it as measured, so no run is assumed ideal. The phasors
follow the DFT's ``exp(-i omega t)``, i.e. ``exp(+j omega t)`` circuit phasors, as in the one-port case.

A run's result is kept per driven port (:attr:`MultiportResult.runs`: every monitor's output, e.g. a
:class:`~mindelec.fdtd.NearToFarMonitor`'s far field for :mod:`mindelec.diversity`). With a ``directory``
each run is saved to ``<directory>/<port name>.pt`` when it ends, and a later call with the same ports
loads it instead of running again: an interrupted set of runs resumes at the first missing port.

Example (two dipoles)::

    ports = [me.fdtd.LumpedPort(name, center, (cell,) * 3, waveform, frequencies) for name, center in feeds]

    def build(driven):  # the simulation with port `driven` on
        return me.fdtd.Simulation(..., structures=[*wires, *(p.resistor for p in ports)],
                                  sources=[driven.source], monitors=[*ports, far_field_monitor])

    result = LumpedMultiport(ports).run(build, until=..., directory="runs")
    result.s_matrix            # (F, 2, 2) complex
    result.write_touchstone("dipoles.s2p")
"""

import math
import pickle
from pathlib import Path

import torch
from tqdm.auto import tqdm

from common.errors import ArgumentTypeError, ConfigurationError, DataError

from .fdtd import LumpedPort, NearToFarResult, Simulation
from .ports import to_network, write_touchstone

#: marks a saved :class:`~mindelec.fdtd.NearToFarResult` among a run's saved monitor outputs
_NEAR_TO_FAR = "near_to_far_result"


def _overlap(first, second):
    """True when the gap boxes of two ports share a volume."""
    return all(
        abs(first.center[a] - second.center[a]) < (first.size[a] + second.size[a]) / 2 for a in range(3)
    )


class LumpedMultiport:
    """``N`` lumped ports of one structure, measured together (see the module docstring).

    Args:
        ports: a sequence of :class:`~mindelec.fdtd.LumpedPort` with distinct names, one list of
            frequencies and gaps that do not overlap; their order is the order of the S matrix.

    Raises:
        ArgumentTypeError: for something other than a ``LumpedPort``.
        ConfigurationError: naming the port, for fewer than one port, a repeated name, frequencies that
            differ from the first port's, or two gaps sharing cells.
    """

    def __init__(self, ports):
        ports = tuple(ports)
        if not ports:
            raise ConfigurationError("LumpedMultiport: give at least one LumpedPort")
        for port in ports:
            if not isinstance(port, LumpedPort):
                raise ArgumentTypeError(f"LumpedMultiport: expected LumpedPort objects, got {port!r}")
        first = ports[0]
        for index, port in enumerate(ports):
            if port.name in (other.name for other in ports[:index]):
                raise ConfigurationError(f"LumpedMultiport: two ports are named {port.name!r}")
            if not torch.equal(port.frequencies, first.frequencies):
                raise ConfigurationError(
                    f"LumpedMultiport: {port!r} has frequencies {port.frequencies.tolist()} Hz, not those of "
                    f"{first!r} ({first.frequencies.tolist()} Hz); every port needs the same list"
                )
            for other in ports[:index]:
                if _overlap(port, other):
                    raise ConfigurationError(f"LumpedMultiport: the gaps of {other!r} and {port!r} overlap")
        self.ports = ports
        self.frequencies = first.frequencies

    def _check_simulation(self, simulation, driven):
        """Refuse a simulation that lacks a port's monitor or resistor or drives the wrong ports."""
        if not isinstance(simulation, Simulation):
            raise ArgumentTypeError(
                f"LumpedMultiport: build({driven.name!r}) must return a mindelec.fdtd.Simulation, got "
                f"{simulation!r}"
            )
        monitors, structures = set(map(id, simulation.monitors)), set(map(id, simulation.structures))
        sources = set(map(id, simulation.sources))
        for port in self.ports:
            where = f"LumpedMultiport: in the simulation built to drive {driven.name!r}, {port!r}"
            if id(port) not in monitors:
                raise ConfigurationError(f"{where} is not among the monitors")
            if id(port.resistor) not in structures:
                raise ConfigurationError(f"{where}: its resistor (port.resistor) is not among the structures")
            if (id(port.source) in sources) != (port is driven):
                state = "is missing from" if port is driven else "must not be among"
                raise ConfigurationError(f"{where}: its source (port.source) {state} the sources")

    def _fingerprint(self, driven):
        """What a saved run must match: the driven port and every port's set-up."""
        return {
            "driven": driven.name,
            "ports": [repr(port) for port in self.ports],
            "frequencies": self.frequencies.tolist(),
        }

    def run(self, build, until=None, steps=None, directory=None, progress=True, until_decayed=None):
        """One FDTD run per port, each port driven in turn; returns a :class:`MultiportResult`.

        Args:
            build: a callable ``build(driven_port) -> mindelec.fdtd.Simulation``: the simulation with every
                port among its monitors and every ``port.resistor`` among its structures (after those it
                sits in), and among its sources ``driven_port.source`` and no other port's source.
            until, steps, until_decayed: as :meth:`mindelec.fdtd.Simulation.run`, for every run.
            directory: where to save each run (``<port name>.pt``) and find those already done; ``None``
                keeps nothing on disk.
            progress: show a progress bar over the runs (and each run's own).

        Raises:
            ConfigurationError: naming the port, for a simulation that does not hold the ports as above;
                for a saved run of other ports, frequencies or driven port than this call's.
        """
        directory = None if directory is None else Path(directory)
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        runs = []
        bar = tqdm(self.ports, desc="ports", unit="run", disable=not progress, leave=False)
        for driven in bar:
            bar.set_postfix_str(f"driving {driven.name}")
            path = None if directory is None else directory / f"{driven.name}.pt"
            if path is not None and path.exists():
                runs.append(self._load(path, driven))
                continue
            simulation = build(driven)
            self._check_simulation(simulation, driven)
            result = simulation.run(until=until, steps=steps, progress=progress, until_decayed=until_decayed)
            outputs = {name: result[name] for name in result.keys()}
            if path is not None:
                self._save(path, driven, outputs)
            runs.append(outputs)
        bar.close()
        return MultiportResult(self.ports, runs)

    def _save(self, path, driven, outputs):
        saved = {}
        for name, output in outputs.items():
            if isinstance(output, NearToFarResult):
                output = {_NEAR_TO_FAR: True, "ground": output.ground, **output}
            saved[name] = output
        partial = path.with_suffix(".part")
        torch.save({"fingerprint": self._fingerprint(driven), "outputs": saved}, partial)
        partial.replace(path)  # a run interrupted while saving leaves no half-written file under the name

    def _load(self, path, driven):
        try:
            saved = torch.load(path, weights_only=True)
        except (OSError, EOFError, RuntimeError, pickle.UnpicklingError) as error:
            raise DataError(f"LumpedMultiport: cannot read the saved run {path}: {error}") from error
        if saved.get("fingerprint") != self._fingerprint(driven):
            raise ConfigurationError(
                f"LumpedMultiport: {path} holds a run of other ports or frequencies than these (driving "
                f"{driven.name!r}); remove it or choose another directory"
            )
        outputs = {}
        for name, output in saved["outputs"].items():
            if isinstance(output, dict) and output.get(_NEAR_TO_FAR):
                fields = {key: value for key, value in output.items() if key not in (_NEAR_TO_FAR, "ground")}
                ground = output["ground"]
                output = NearToFarResult(**fields, ground=None if ground is None else tuple(ground))
            outputs[name] = output
        return outputs


class MultiportResult:
    """The runs of a :class:`LumpedMultiport` and the network they measure.

    Attributes:
        ports: the ports, in the order of the matrices' rows and columns.
        frequencies: (F,) Hz.
        runs: one dict per driven port (in port order) of every monitor's output of that run.
        voltages, currents: (F, N, N) complex: ``[f, i, j]`` the DFT of port ``i``'s gap voltage (V s) and
            of its current into the structure (A s) in the run driving port ``j``.
        impedances: (N,) the ports' reference impedances ``R0`` (ohm).
    """

    def __init__(self, ports, runs):
        self.ports, self.runs = tuple(ports), list(runs)
        self.frequencies = self.ports[0].frequencies
        self.voltages = torch.stack(
            [torch.stack([run[port.name]["voltage"] for port in self.ports], -1) for run in self.runs], -1
        )
        self.currents = torch.stack(
            [torch.stack([run[port.name]["current"] for port in self.ports], -1) for run in self.runs], -1
        )
        self.impedances = torch.tensor([port.impedance for port in self.ports], dtype=torch.float64)

    @property
    def incident(self):
        """(F, N, N) complex: the power waves ``a = (V + R0 I) / (2 sqrt R0)`` (sqrt(W) s), ``[f, i, j]``
        at port ``i`` in the run driving port ``j``."""
        r0 = self.impedances.to(self.voltages.device)[:, None]
        return (self.voltages + r0 * self.currents) / (2 * r0.sqrt())

    @property
    def reflected(self):
        """(F, N, N) complex: the power waves ``b = (V - R0 I) / (2 sqrt R0)``, indexed as
        :attr:`incident`."""
        r0 = self.impedances.to(self.voltages.device)[:, None]
        return (self.voltages - r0 * self.currents) / (2 * r0.sqrt())

    @property
    def s_matrix(self):
        """(F, N, N) complex: ``S = B A^-1``, ``[f, i, j] = S_ij`` (power waves referred to each ``R0``)."""
        return torch.linalg.solve(self.incident, self.reflected, left=False).resolve_conj()

    @property
    def z_matrix(self):
        """(F, N, N) complex: the open-circuit impedance matrix ``Z = V I^-1`` (ohm), ``[f, i, j] = Z_ij``."""
        return torch.linalg.solve(self.currents, self.voltages, left=False).resolve_conj()

    def network(self, name=None):
        """The ``N``-port ``skrf.Network`` of :attr:`s_matrix`, each port's ``z0`` its ``R0``."""
        return to_network(self.frequencies, self.s_matrix, z0=self.impedances.numpy(), name=name)

    def write_touchstone(self, path):
        """Write :attr:`s_matrix` to the Touchstone file ``path`` (suffix ``.sNp``, ``N`` ports, e.g.
        ``.s2p``); ports of different ``R0`` are refused by the format's single reference impedance.
        Returns the path."""
        impedances = self.impedances.tolist()
        if any(not math.isclose(value, impedances[0]) for value in impedances):
            raise ConfigurationError(
                f"MultiportResult.write_touchstone: the ports' reference impedances differ ({impedances} "
                "ohm); a Touchstone file has one: renormalize the network (network().renormalize(50)) and "
                "write that"
            )
        return write_touchstone(path, self.frequencies, self.s_matrix, z0=impedances[0])

    def far_fields(self, name):
        """The :class:`~mindelec.fdtd.NearToFarResult` of the monitor ``name`` in each run (port order)."""
        return [run[name] for run in self.runs]

    def radiation_matrix(self, name):
        """The radiation matrix of the ports' embedded patterns from the near-to-far monitor ``name``
        (:func:`mindelec.diversity.radiation_matrix`): (F', N, N) complex at the monitor's ``F'``
        frequencies, each of which must be one of the ports'.

        Raises:
            ConfigurationError: naming the monitor, for a frequency the ports did not measure.
        """
        from .diversity import radiation_matrix

        far_fields = self.far_fields(name)
        wanted = far_fields[0]["frequencies"].to(self.frequencies)
        matches = (wanted[:, None] - self.frequencies[None, :]).abs() <= 1e-9 * self.frequencies.abs().max()
        missing = ~matches.any(dim=1)
        if bool(missing.any()):
            raise ConfigurationError(
                f"MultiportResult.radiation_matrix: the monitor {name!r} has frequencies "
                f"{wanted[missing].tolist()} Hz that the ports did not measure "
                f"({self.frequencies.tolist()} Hz)"
            )
        return radiation_matrix(far_fields, self.incident[matches.to(torch.int64).argmax(dim=1)])

    def __repr__(self):
        names = [port.name for port in self.ports]
        return f"MultiportResult(ports={names}, frequencies={len(self.frequencies)})"
