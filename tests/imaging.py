"""2D test images: real MR slices (nibabel's example4d) and real JPEG bitstreams (pydicom's test files),
encoded by the real encoders (libjpeg-turbo, Pillow, jpegtran), and the reference decodes to compare with."""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
from PIL import Image
from pydicom.encaps import generate_frames
from turbojpeg import TJPF_GRAY, TJPF_RGB, TJSAMP_420, TJSAMP_444, TJSAMP_GRAY, TurboJPEG

from labzarr.convert.demo import NIBABEL_DATA

PYDICOM_DATA = Path(os.path.dirname(pydicom.__file__)) / "data" / "test_files"


def mr_slices(h: int, w: int, *, channels: int = 3, seed: int = 0) -> np.ndarray:
    """(H, W, C) uint8: the centre of real MR slices (one per channel) resampled to h x w, plus seeded noise."""
    data = np.asanyarray(nib.load(NIBABEL_DATA / "example4d.nii.gz").dataobj)[..., 0].astype(np.float64)
    rng = np.random.default_rng(seed)
    rows = np.linspace(32, 95, h).round().astype(int)
    cols = np.linspace(24, 71, w).round().astype(int)
    planes = []
    for _ in range(channels):
        plane = data[:, :, int(rng.integers(6, 18))][np.ix_(rows, cols)]
        plane = (plane - plane.min()) / max(float(np.ptp(plane)), 1.0) * 235 + rng.normal(0, 4, (h, w)) + 10
        planes.append(plane)
    return np.stack(planes, axis=-1).clip(0, 255).round().astype(np.uint8)


def turbo_jpeg(hwc: np.ndarray, *, quality: int = 90, subsample: int = TJSAMP_420) -> bytes:
    """Encode with libjpeg-turbo (baseline; grey when C == 1)."""
    if hwc.shape[2] == 1:
        return bytes(TurboJPEG().encode(hwc, quality=quality, pixel_format=TJPF_GRAY, jpeg_subsample=TJSAMP_GRAY))
    return bytes(TurboJPEG().encode(hwc, quality=quality, pixel_format=TJPF_RGB, jpeg_subsample=subsample))


def pillow_image(hwc: np.ndarray, fmt: str, **save: object) -> bytes:
    """Encode with Pillow (JPEG progressive/CMYK/EXIF, PNG, TIFF)."""
    arr = hwc[:, :, 0] if hwc.ndim == 3 and hwc.shape[2] == 1 else hwc
    image = Image.fromarray(arr)
    mode = save.pop("mode", None)
    if isinstance(mode, str):
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, fmt, **save)
    return out.getvalue()


def dicom_jpeg(name: str) -> bytes:
    """The JPEG bitstream of the first frame of one of pydicom's encapsulated test files."""
    ds = pydicom.dcmread(PYDICOM_DATA / name)
    return bytes(next(generate_frames(ds.PixelData, number_of_frames=int(getattr(ds, "NumberOfFrames", 1) or 1))))


def jpegtran(data: bytes, *args: str) -> bytes:
    """Transcode losslessly with libjpeg-turbo's jpegtran (e.g. "-arithmetic")."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.jpg"
        src.write_bytes(data)
        out = subprocess.run(["jpegtran", *args, str(src)], capture_output=True, check=True, timeout=60)
    return out.stdout


def turbo_decode(data: bytes) -> np.ndarray:
    """PyTurboJPEG's plain decode, as (C, H, W): the reference the store must equal."""
    tj = TurboJPEG()
    grey = tj.decode_header(data)[3] == 2  # TJCS_GRAY
    hwc = tj.decode(data, pixel_format=TJPF_GRAY if grey else TJPF_RGB)
    return np.moveaxis(hwc, 2, 0)


def pillow_decode(data: bytes, *, transpose_exif: bool = False) -> np.ndarray:
    """Pillow's decode (grey stays grey, everything else RGB), as (C, H, W)."""
    from PIL import ImageOps

    with Image.open(io.BytesIO(data)) as im:
        image = ImageOps.exif_transpose(im) if transpose_exif else im
        arr = np.asarray(image if image.mode in ("L", "I;16", "F", "I") else image.convert("RGB"))
    return arr[np.newaxis] if arr.ndim == 2 else np.moveaxis(arr, 2, 0)


def write_image_delivery(raw: Path) -> dict[str, tuple[str, str]]:
    """A messy 2D delivery under `raw`; returns each file's expected (status, reason)."""
    raw.mkdir(parents=True, exist_ok=True)
    expected: dict[str, tuple[str, str]] = {}

    def put(rel: str, data: bytes, status: str = "ok", reason: str = "") -> None:
        (raw / rel).parent.mkdir(parents=True, exist_ok=True)
        (raw / rel).write_bytes(data)
        expected[rel] = (status, reason)

    for i in range(1, 13):
        put(f"tiles/tile_{i:03d}.jpg", turbo_jpeg(mr_slices(32, 40, seed=i), subsample=(TJSAMP_420, TJSAMP_444)[i % 2]))
    put("tiles/tile_013.jpg", pillow_image(mr_slices(32, 40, seed=13), "JPEG", quality=90, progressive=True))
    put("tiles/tile_014.jpg", turbo_jpeg(mr_slices(32, 40, channels=1, seed=14)))
    put("tiles/tile_015.jpg", pillow_image(mr_slices(32, 40, seed=15), "JPEG", mode="CMYK", quality=95))
    exif = Image.Exif()
    exif[0x0112] = 6
    put("tiles/tile_016.jpg", pillow_image(mr_slices(40, 32, seed=16), "JPEG", quality=95, exif=exif.tobytes()))
    put("tiles/tile_017.jpg", jpegtran(turbo_jpeg(mr_slices(32, 40, seed=17)), "-arithmetic"))
    put("tiles/tile_018.jpg", dicom_jpeg("JPGExtended.dcm"))
    good = turbo_jpeg(mr_slices(32, 40, seed=20))
    for n, frac in zip(range(20, 24), (0.1, 0.5, 0.9, 0.99)):
        put(f"tiles/tile_{n:03d}.jpg", good[: int(len(good) * frac)], "rejected", "truncated")
    put("tiles/tile_024.jpg", b"", "rejected", "empty_file")
    put("tiles/tile_025.jpg", pillow_image(mr_slices(32, 40, seed=25), "PNG"))
    put("tiles/tile_026.jpg", pillow_image(mr_slices(32, 40, seed=26), "TIFF", compression="tiff_deflate"))
    put("tiles/tile_027.jpg", b"This tile was lost; ask the scanner operator.\n", "rejected", "unsupported_format")
    put("tiles/tile_028.jpg", (raw / "tiles/tile_001.jpg").read_bytes(), "rejected", "duplicate_content")
    bomb = bytearray(good)
    at = bomb.find(b"\xff\xc0")
    bomb[at + 5 : at + 9] = (60000).to_bytes(2, "big") * 2
    put("tiles/tile_029.jpg", bytes(bomb), "rejected", "too_large")
    put("tiles/tile_030.jpg", dicom_jpeg("SC_rgb_jpeg_gdcm.dcm"))
    put("notes.txt", b"Scanner notes: tile 27 was lost.\n", "ignored")
    return expected
