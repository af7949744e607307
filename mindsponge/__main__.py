"""``python -m mindsponge run config.toml``: see :mod:`mindsponge.cli`."""

import sys

from common.deprecation import moved_attributes
from mindsponge.cli import main

# the command line's configuration classes and run() lived here before mindsponge.cli
__getattr__ = moved_attributes(
    __name__,
    {
        name: f"mindsponge.cli:{name}"
        for name in (
            "RunConfig", "run", "SystemConfig", "WaterBoxConfig", "ForceFieldConfig", "IntegratorConfig",
            "ThermostatConfig", "BarostatConfig", "OutputConfig",
        )
    },
)

if __name__ == "__main__":
    sys.exit(main())
