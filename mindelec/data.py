"""Deprecated: the old home of the CAD, voxel, point-cloud and demo-device functions.

``mindelec.data.X`` still works for one release and warns; use :mod:`mindelec.cad` (meshes,
``MeshGeometry``, ``structure_from_cad``), :mod:`mindelec.voxels` (grids),
:mod:`mindelec.point_clouds` (``sample_point_cloud``) or :mod:`mindelec.devices` (demo devices).
"""

from common.deprecation import moved_attributes

__getattr__ = moved_attributes(
    __name__,
    {
        "MESH_SUFFIXES": "mindelec.cad:MESH_SUFFIXES",
        "load_mesh": "mindelec.cad:load_mesh",
        "repair_mesh": "mindelec.cad:repair_mesh",
        "require_watertight": "mindelec.cad:require_watertight",
        "MeshGeometry": "mindelec.cad:MeshGeometry",
        "structure_from_cad": "mindelec.cad:structure_from_cad",
        "node_coordinates": "mindelec.voxels:node_coordinates",
        "signed_distance_grid": "mindelec.voxels:signed_distance_grid",
        "fill_fractions": "mindelec.voxels:fill_fractions",
        "material_grid": "mindelec.voxels:material_grid",
        "permittivity_grid": "mindelec.voxels:permittivity_grid",
        "sample_point_cloud": "mindelec.point_clouds:sample_point_cloud",
        "waveguide_obstacle": "mindelec.devices:waveguide_obstacle",
        "patch_antenna": "mindelec.devices:patch_antenna_meshes",
    },
)
