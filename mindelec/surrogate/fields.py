"""Field surrogates and a convolutional autoencoder for grids (see :mod:`mindelec.surrogate`)."""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

from common import checks
from common.errors import ConfigurationError
from mindelec.surrogate.sparameters import sweep_columns

__all__ = ["FieldSurrogate", "load_field_dataset", "ConvAutoencoder"]


def _conv_block(channels_in, channels_out, stride=1):
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1), nn.SiLU())


def _pad_to_multiple(grid: torch.Tensor, multiple: int) -> tuple[torch.Tensor, tuple[int, int]]:
    height, width = grid.shape[-2:]
    pad_h, pad_w = (-height) % multiple, (-width) % multiple
    return nn.functional.pad(grid, (0, pad_w, 0, pad_h), mode="replicate"), (height, width)


class FieldSurrogate(nn.Module):
    """Permittivity map -> complex frequency-domain field map (a small convolutional U-Net).

    Input channels: the standardised permittivity and the two node coordinates in ``[-1, 1]`` (so that
    the network knows where the source and ports are); ``levels`` stride-2 stages with skip connections, and
    at the bottleneck a global context vector (the spatial mean through a linear layer) added everywhere,
    since fields in a guide depend on the whole structure, beyond any convolution's receptive field.

    Args:
        width: channels of the first stage (doubled per level).
        levels: down-sampling stages (the receptive field grows like ``2^levels``).
        permittivity_scale: the permittivity is standardised as ``(eps - 1) / permittivity_scale``.

    Shapes:
        :meth:`forward`: ``(B, H, W)`` relative permittivity -> ``(B, 2, H, W)`` (real, imaginary parts).
        :meth:`predict`: ``(B, H, W)`` -> ``(B, H, W)`` complex.
    """

    def __init__(self, width: int = 16, levels: int = 3, permittivity_scale: float = 3.0):
        super().__init__()
        checks.positive_int(width, "FieldSurrogate: width (channels)")
        self.levels = checks.positive_int(levels, "FieldSurrogate: levels")
        self.permittivity_scale = checks.positive(permittivity_scale, "FieldSurrogate: permittivity_scale")
        self.options = {"width": width, "levels": levels, "permittivity_scale": permittivity_scale}
        channels = [width * 2**level for level in range(levels + 1)]
        self.stem = _conv_block(3, channels[0])
        self.down = nn.ModuleList(
            nn.Sequential(
                _conv_block(channels[i], channels[i + 1], stride=2),
                _conv_block(channels[i + 1], channels[i + 1]),
            )
            for i in range(levels)
        )
        self.up = nn.ModuleList(
            nn.ConvTranspose2d(channels[i + 1], channels[i], 2, stride=2) for i in range(levels)
        )
        self.merge = nn.ModuleList(_conv_block(2 * channels[i], channels[i]) for i in range(levels))
        self.context = nn.Linear(channels[-1], channels[-1])
        self.head = nn.Conv2d(channels[0], 2, 1)

    def forward(self, permittivity: torch.Tensor) -> torch.Tensor:
        if permittivity.dim() != 3:
            raise ConfigurationError(
                f"FieldSurrogate expects permittivity (B, H, W), got {tuple(permittivity.shape)}"
            )
        dtype = self.head.weight.dtype
        grid, (height, width) = _pad_to_multiple(permittivity.to(dtype)[:, None], 2**self.levels)
        rows = torch.linspace(-1, 1, grid.shape[-2], dtype=dtype, device=grid.device)
        columns = torch.linspace(-1, 1, grid.shape[-1], dtype=dtype, device=grid.device)
        coordinates = torch.stack(torch.meshgrid(rows, columns, indexing="ij")).expand(len(grid), -1, -1, -1)
        hidden = self.stem(torch.cat([(grid - 1) / self.permittivity_scale, coordinates], 1))
        skips = []
        for stage in self.down:
            skips.append(hidden)
            hidden = stage(hidden)
        # global context at the bottleneck: a waveguide's field depends on the whole structure
        hidden = hidden + self.context(hidden.mean(dim=(2, 3)))[:, :, None, None]
        for level in reversed(range(self.levels)):
            hidden = self.merge[level](torch.cat([self.up[level](hidden), skips[level]], 1))
        return self.head(hidden)[..., :height, :width]

    def predict(self, permittivity: torch.Tensor) -> torch.Tensor:
        """Complex field ``(B, H, W)``."""
        output = self(permittivity)
        return torch.complex(output[:, 0], output[:, 1])


def load_field_dataset(path) -> dict:
    """Read field samples (the keys of :func:`mindelec.sweeps.field_sample`) from an HDF5 table.

    Returns:
        dict: ``permittivity`` (N, H, W) float tensor, ``field`` (N, H, W) complex128 tensor, ``frequency``
        (): Hz (all samples must share it).
    """
    table = sweep_columns(path, ["permittivity", "field_real", "field_imag", "frequency"])
    frequency = np.unique(np.asarray(table["frequency"], dtype=np.float64))
    if len(frequency) != 1:
        raise ConfigurationError(f"field file {os.fspath(path)!r} mixes frequencies {frequency.tolist()} Hz")
    field = np.asarray(table["field_real"]) + 1j * np.asarray(table["field_imag"])
    return {
        "permittivity": torch.as_tensor(np.asarray(table["permittivity"], dtype=np.float64)),
        "field": torch.as_tensor(field, dtype=torch.complex128),
        "frequency": float(frequency[0]),
    }


# ---------------------------------------------------------------------------------------------- encoding


class ConvAutoencoder(nn.Module):
    """Convolutional autoencoder for 2D grids (field snapshots, geometry tensors).

    ``levels`` stride-2 convolutions take ``(B, C, H, W)`` to the latent ``(B, latent_channels, H / 2^levels,
    W / 2^levels)``; transposed convolutions mirror them. Inputs are standardised by one shift and scale per
    channel (:meth:`set_normalization`); ``H`` and ``W`` must be multiples of ``2^levels``.

    Args:
        channels: input channels ``C``.
        latent_channels: channels of the latent grid.
        width: channels of the first stage (doubled per level).
        levels: down-sampling stages.

    Shapes:
        :meth:`encode`: ``(B, C, H, W)`` -> latent; :meth:`decode`: latent -> ``(B, C, H, W)``;
        :meth:`forward` = decode(encode(x)).
    """

    def __init__(self, channels: int = 1, latent_channels: int = 4, width: int = 16, levels: int = 3):
        super().__init__()
        self.channels = checks.positive_int(channels, "ConvAutoencoder: channels")
        self.latent_channels = checks.positive_int(latent_channels, "ConvAutoencoder: latent_channels")
        self.levels = checks.positive_int(levels, "ConvAutoencoder: levels")
        checks.positive_int(width, "ConvAutoencoder: width (channels)")
        widths = [width * 2**level for level in range(levels)]
        encoder, decoder = [], []
        previous = channels
        for stage_width in widths:
            encoder += [
                nn.Conv2d(previous, stage_width, 4, stride=2, padding=1),
                nn.SiLU(),
                nn.Conv2d(stage_width, stage_width, 3, padding=1),
                nn.SiLU(),
            ]
            previous = stage_width
        encoder.append(nn.Conv2d(previous, latent_channels, 1))
        decoder.append(nn.Conv2d(latent_channels, previous, 1))
        for stage_width in reversed([channels] + widths[:-1]):
            decoder += [
                nn.SiLU(),
                nn.Conv2d(previous, previous, 3, padding=1),
                nn.SiLU(),
                nn.ConvTranspose2d(previous, stage_width, 4, stride=2, padding=1),
            ]
            previous = stage_width
        self.encoder, self.decoder = nn.Sequential(*encoder), nn.Sequential(*decoder)
        self.register_buffer("shift", torch.zeros(channels))
        self.register_buffer("scale", torch.ones(channels))

    def _check(self, grid: torch.Tensor) -> None:
        factor = 2**self.levels
        if (
            grid.dim() != 4
            or grid.shape[1] != self.channels
            or grid.shape[2] % factor
            or grid.shape[3] % factor
        ):
            raise ConfigurationError(
                f"ConvAutoencoder expects (B, {self.channels}, H, W) with H and W multiples of "
                f"{factor}, got {tuple(grid.shape)}"
            )

    def set_normalization(self, grids: torch.Tensor) -> None:
        """Per-channel mean and standard deviation of training grids ``(N, C, H, W)``."""
        self._check(grids)
        self.shift.copy_(grids.mean(dim=(0, 2, 3)))
        self.scale.copy_(grids.std(dim=(0, 2, 3)).clamp(min=torch.finfo(grids.dtype).tiny))

    def encode(self, grid: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, latent_channels, H / 2^levels, W / 2^levels)``."""
        self._check(grid)
        return self.encoder((grid - self.shift[:, None, None]) / self.scale[:, None, None])

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """Latent -> ``(B, C, H, W)`` in the input's units."""
        return self.decoder(latent) * self.scale[:, None, None] + self.shift[:, None, None]

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(grid))

    @property
    def compression_ratio(self) -> float:
        """Input values per latent value: ``C H W / (latent_channels H W / 4^levels)``."""
        return self.channels * 4**self.levels / self.latent_channels
