"""Images in chat messages: base64 data URLs decoded to PIL images, within size limits.

The server runs offline, so an `http(s)://` image URL is refused with a message saying how
to send the image instead. A decoded image is checked for its byte size and pixel count
before it is fully decoded (a small PNG can claim gigapixels).
"""

from __future__ import annotations

import base64
import binascii
import io
import re

from engine.serve.protocol import ApiError

__all__ = ["decode_image_url", "finish_image", "open_image_url"]

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,", re.I)


def decode_image_url(url: str, where: str, max_bytes: int, max_pixels: int):
    """The PIL image (RGB) a data URL holds: `open_image_url` then `finish_image`."""
    return finish_image(open_image_url(url, where, max_bytes, max_pixels), where)


def open_image_url(url: str, where: str, max_bytes: int, max_pixels: int):
    """The PIL image a data URL holds, opened but not decoded (Pillow has read only its header).

    Its `size` is what the file declares; a request checks the sum over its images before any is decoded.

    Args:
        url: `data:image/png;base64,....` (any image format Pillow reads).
        where: names the part in error messages, e.g. "messages[2].content[1]".
        max_bytes: largest decoded size accepted.
        max_pixels: largest width x height accepted.
    Raises:
        ApiError(400) naming `where` for a remote URL, a malformed data URL or an unreadable image;
        ApiError(413) for an image over the limits.
    """
    if not isinstance(url, str) or not url:
        raise ApiError(400, f"{where}: image_url.url must be a non-empty string (a data:image/...;base64 URL)", where)
    if re.match(r"^(https?|ftp|file)://", url, re.I):
        raise ApiError(400, f"{where}: dossier serve runs offline and does not fetch image URLs ({url[:60]!r}); send "
                            "the image inline as a data URL: data:image/png;base64,<base64 of the file>", where)
    match = _DATA_URL.match(url)
    if match is None or not match.group("b64"):
        raise ApiError(400, f"{where}: the image URL is not a base64 data URL (expected "
                            f"'data:image/png;base64,...', got {url[:40]!r})", where)
    payload = url[match.end():]
    if len(payload) * 3 // 4 > max_bytes:
        raise ApiError(413, f"{where}: the image is about {len(payload) * 3 // 4} bytes, over the limit of "
                            f"{max_bytes} bytes; send a smaller image", where)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ApiError(400, f"{where}: the image's base64 data is malformed ({err})", where) from None
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise ApiError(400, f"{where}: the data is not a readable image ({type(err).__name__}: {err})", where) from None
    if width * height > max_pixels:
        raise ApiError(413, f"{where}: the image is {width}x{height} = {width * height} pixels, over the limit of "
                            f"{max_pixels}; send a smaller image", where)
    return image


def finish_image(image, where: str):
    """Decode an image from `open_image_url` to RGB; ApiError(400) naming `where` when its data is broken."""
    from PIL import Image

    try:
        image.load()
        return image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise ApiError(400, f"{where}: the data is not a readable image ({type(err).__name__}: {err})", where) from None
