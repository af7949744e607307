// The Python bindings of mindsponge's compiled kernels (see kernels.h for what each file holds).
#include <torch/extension.h>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "kernels.h"

namespace py = pybind11;
using namespace mindsponge_kernels;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("bond_forces", &bond_forces, "harmonic bonds: (energy, forces)");
  module.def("angle_forces", &angle_forces, "harmonic angles: (energy, forces)");
  module.def("torsion_forces", &torsion_forces, "periodic torsions: (energy, forces)");
  module.def("improper_forces", &improper_forces, "harmonic impropers: (energy, forces)");

  module.def("settle_positions", &settle_positions, "SETTLE position update of rigid three-site waters");
  module.def("settle_velocities", &settle_velocities, "rigid-body velocity projection of three-site waters");
  module.def("shake_positions", &shake_positions, "SHAKE of distance constraints");
  module.def("rattle_velocities", &rattle_velocities, "RATTLE velocity projection of distance constraints");

  module.def("pair_forces", &pair_forces, "LJ + Coulomb energies and gradients of a pair list");
  module.def("cell_neighbors", &cell_neighbors, "cell-list search as compressed rows of neighbours");
  module.def("cluster_pairs", &cluster_pairs, "clusters of 8 atoms and their cluster-pair list");
  module.def("cluster_forces", &cluster_forces, "LJ + Coulomb energies and gradients over a cluster-pair list");
  module.def("rows_to_pairs", &rows_to_pairs, "compressed rows as (P, 2) pairs i < j sorted by i");
  module.def("prepare_pairs", &prepare_pairs, "pair parameters and shifts, LJ pairs first, by first atom");
  module.def("pme_spread", &pme_spread, "B-spline charge spreading onto the PME grid");
  module.def("pme_gather", &pme_gather, "PME energy gradient wrt the scaled (grid) coordinates");

  py::class_<ForceTerm, std::shared_ptr<ForceTerm>>(module, "ForceTerm")
      .def(
          "add_forces",
          [](ForceTerm& self, const at::Tensor& positions, std::optional<at::Tensor> box, at::Tensor forces) {
            return self.add_forces(positions, box.has_value() ? *box : at::Tensor(), forces);
          },
          "add -dE/dx at positions (N, 3) into forces (N, 3), in place; returns E (kJ/mol)", py::arg("positions"),
          py::arg("box"), py::arg("forces"));
  py::class_<BondedTerm, ForceTerm, std::shared_ptr<BondedTerm>>(module, "BondedTerm")
      .def(py::init([](int64_t kind, at::Tensor atoms, std::vector<at::Tensor> parameters, double period) {
             return std::make_shared<BondedTerm>(static_cast<BondedKind>(kind), atoms, parameters, period);
           }),
           py::arg("kind"), py::arg("atoms"), py::arg("parameters"), py::arg("period") = 0.0);
  py::class_<PairTerm, ForceTerm, std::shared_ptr<PairTerm>>(module, "PairTerm")
      .def(py::init<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, double, double, int64_t, double,
                    double, double, bool>(),
           py::arg("first"), py::arg("second"), py::arg("charge_products"), py::arg("sigma_squared"),
           py::arg("epsilon4"), py::arg("cutoff"), py::arg("switch_distance"), py::arg("kind"), py::arg("alpha"),
           py::arg("krf"), py::arg("crf"), py::arg("periodic"));
  py::class_<NeighborNonbondedSpec>(module, "NeighborNonbondedSpec")
      .def(py::init<>())
      .def_readwrite("charges", &NeighborNonbondedSpec::charges)
      .def_readwrite("scaled_charges", &NeighborNonbondedSpec::scaled_charges)
      .def_readwrite("half_sigma", &NeighborNonbondedSpec::half_sigma)
      .def_readwrite("epsilon_root2", &NeighborNonbondedSpec::epsilon_root2)
      .def_readwrite("cutoff", &NeighborNonbondedSpec::cutoff)
      .def_readwrite("skin", &NeighborNonbondedSpec::skin)
      .def_readwrite("switch_distance", &NeighborNonbondedSpec::switch_distance)
      .def_readwrite("kind", &NeighborNonbondedSpec::kind)
      .def_readwrite("alpha", &NeighborNonbondedSpec::alpha)
      .def_readwrite("krf", &NeighborNonbondedSpec::krf)
      .def_readwrite("crf", &NeighborNonbondedSpec::crf)
      .def_readwrite("exclusion_starts", &NeighborNonbondedSpec::exclusion_starts)
      .def_readwrite("exclusion_partners", &NeighborNonbondedSpec::exclusion_partners)
      .def_readwrite("exceptions", &NeighborNonbondedSpec::exceptions)
      .def_readwrite("exclusions", &NeighborNonbondedSpec::exclusions)
      .def_readwrite("pme_grid", &NeighborNonbondedSpec::pme_grid)
      .def_readwrite("pme_order", &NeighborNonbondedSpec::pme_order)
      .def_readwrite("pme_moduli", &NeighborNonbondedSpec::pme_moduli)
      .def_readwrite("constant", &NeighborNonbondedSpec::constant)
      .def_readwrite("background", &NeighborNonbondedSpec::background)
      .def_readwrite("dispersion", &NeighborNonbondedSpec::dispersion);
  py::class_<NeighborNonbondedTerm, ForceTerm, std::shared_ptr<NeighborNonbondedTerm>>(module, "NeighborNonbondedTerm")
      .def(py::init<NeighborNonbondedSpec>(), py::arg("spec"))
      .def("reference", &NeighborNonbondedTerm::reference)
      .def("set_reference", &NeighborNonbondedTerm::set_reference, py::arg("positions"), py::arg("box"))
      .def("builds", &NeighborNonbondedTerm::builds)
      .def("cutoff", &NeighborNonbondedTerm::cutoff);
  py::class_<ExpressionPairSpec>(module, "ExpressionPairSpec")
      .def(py::init<>())
      .def_readwrite("code", &ExpressionPairSpec::code)
      .def_readwrite("values", &ExpressionPairSpec::values)
      .def_readwrite("registers", &ExpressionPairSpec::registers)
      .def_readwrite("result", &ExpressionPairSpec::result)
      .def_readwrite("first", &ExpressionPairSpec::first)
      .def_readwrite("second", &ExpressionPairSpec::second)
      .def_readwrite("pair_table", &ExpressionPairSpec::pair_table)
      .def_readwrite("particle_table", &ExpressionPairSpec::particle_table)
      .def_readwrite("weights", &ExpressionPairSpec::weights)
      .def_readwrite("cutoff", &ExpressionPairSpec::cutoff)
      .def_readwrite("skin", &ExpressionPairSpec::skin)
      .def_readwrite("switch_distance", &ExpressionPairSpec::switch_distance)
      .def_readwrite("periodic", &ExpressionPairSpec::periodic)
      .def_readwrite("long_range", &ExpressionPairSpec::long_range);
  py::class_<ExpressionPairTerm, ForceTerm, std::shared_ptr<ExpressionPairTerm>>(module, "ExpressionPairTerm")
      .def(py::init<ExpressionPairSpec>(), py::arg("spec"))
      .def("builds", &ExpressionPairTerm::builds);
  py::class_<CallbackTerm, ForceTerm, std::shared_ptr<CallbackTerm>>(module, "CallbackTerm")
      .def(py::init<ForceCallback>(), py::arg("callback"));

  py::class_<ForceProgram, std::shared_ptr<ForceProgram>>(module, "ForceProgram")
      .def(py::init<std::vector<std::shared_ptr<ForceTerm>>, at::ScalarType, at::Tensor, at::Tensor, at::Tensor,
                    at::Tensor>(),
           py::arg("terms"), py::arg("compute"), py::arg("sites"), py::arg("parents"), py::arg("weights"),
           py::arg("cross_weights"))
      .def("evaluate",
           [](ForceProgram& self, const at::Tensor& positions, std::optional<at::Tensor> box) {
             return self.evaluate(positions, box.has_value() ? *box : at::Tensor());
           })
      .def("place_sites", &ForceProgram::place_sites);

  py::class_<ConstraintSpec>(module, "ConstraintSpec")
      .def(py::init<>())
      .def_readwrite("settle_atoms", &ConstraintSpec::settle_atoms)
      .def_readwrite("settle_oh", &ConstraintSpec::settle_oh)
      .def_readwrite("settle_hh", &ConstraintSpec::settle_hh)
      .def_readwrite("pairs", &ConstraintSpec::pairs)
      .def_readwrite("distances", &ConstraintSpec::distances)
      .def_readwrite("tolerance", &ConstraintSpec::tolerance)
      .def_readwrite("max_iterations", &ConstraintSpec::max_iterations);
  py::class_<IntegratorSpec>(module, "IntegratorSpec")
      .def(py::init<>())
      .def_readwrite("kind", &IntegratorSpec::kind)
      .def_readwrite("dt", &IntegratorSpec::dt)
      .def_readwrite("decay", &IntegratorSpec::decay)
      .def_readwrite("thermal", &IntegratorSpec::thermal)
      .def_readwrite("thermal_per_atom", &IntegratorSpec::thermal_per_atom)
      .def_readwrite("thermostat", &IntegratorSpec::thermostat)
      .def_readwrite("temperature", &IntegratorSpec::temperature)
      .def_readwrite("time_constant", &IntegratorSpec::time_constant)
      .def_readwrite("chain_length", &IntegratorSpec::chain_length);
  py::class_<Dynamics, std::shared_ptr<Dynamics>>(module, "Dynamics")
      .def(py::init<std::shared_ptr<ForceProgram>, at::Tensor, IntegratorSpec, ConstraintSpec, bool, int64_t,
                    at::Generator>(),
           py::arg("forces"), py::arg("masses"), py::arg("integrator"), py::arg("constraints"),
           py::arg("remove_center_of_mass_motion"), py::arg("degrees_of_freedom"), py::arg("generator"))
      .def("set_state", &Dynamics::set_state, py::arg("positions"), py::arg("velocities"), py::arg("box"),
           py::arg("forces"), py::arg("energy"), py::arg("step"), py::arg("time"), py::arg("rng_state"),
           py::arg("chain"))
      .def("run", &Dynamics::run, py::arg("steps"), py::arg("max_energy_jump"), py::arg("seconds"))
      .def("positions", &Dynamics::positions)
      .def("velocities", &Dynamics::velocities)
      .def("forces", &Dynamics::forces)
      .def("energy", &Dynamics::energy)
      .def("step", &Dynamics::step)
      .def("time", &Dynamics::time)
      .def("rng_state", &Dynamics::rng_state)
      .def("chain", &Dynamics::chain);
}
