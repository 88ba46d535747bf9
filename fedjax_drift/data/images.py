"""Decoded images of mixed sizes and modes, fitted into one preallocated uint8 NHWC array.

Readers of image collections (DomainNet folders, TFDS and Hugging Face datasets) decode one
image at a time and `put` it into an `ImageStack`, so memory holds the final array only.
Resizing is PIL's bilinear resize, which is what torchvision's `Resize` does on PIL images
(FedBN's transforms); grey images are widened to RGB by repeating the plane, as
torchvision's `Grayscale(num_output_channels=3)` does.
"""
import numpy as np

from fedjax_drift.errors import UserError

GREY_MODES = ('1', 'L', 'I', 'I;16', 'F', 'LA')


def to_pil(image):
  """A PIL image from a PIL image or a uint8 array [H, W], [H, W, 1], [H, W, 3] or [H, W, 4]."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  if isinstance(image, Image.Image):
    return image
  array = np.asarray(image)
  if array.dtype != np.uint8:
    raise ValueError(f'images must be uint8, got {array.dtype}')
  if array.ndim == 3 and array.shape[-1] == 1:
    array = array[..., 0]
  if array.ndim == 2:
    return Image.fromarray(array, 'L')
  if array.ndim == 3 and array.shape[-1] in (3, 4):
    return Image.fromarray(array, 'RGB' if array.shape[-1] == 3 else 'RGBA')
  raise ValueError(f'an image must be [H, W] or [H, W, 1|3|4], got shape {array.shape}')


def fit(image, size=0):
  """uint8 [S, S, 1] (grey) or [S, S, 3] from a PIL image or array; size 0 keeps its size.

  Grey modes stay one channel; any other mode (RGBA, P, CMYK, ...) becomes RGB."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  pil = to_pil(image)
  pil = pil.convert('L') if pil.mode in GREY_MODES else pil.convert('RGB')
  if size and pil.size != (size, size):
    pil = pil.resize((size, size), Image.BILINEAR)
  array = np.asarray(pil, np.uint8)
  return array[..., None] if array.ndim == 2 else array


class ImageStack:
  """A preallocated [N, H, W, C] uint8 array filled one image at a time.

  H, W come from `size` (every image resized to size x size) or, with size 0, from the first
  image, and then every image must match. C is 1 until the first RGB image arrives; from then
  on the stack is RGB and earlier grey images are repeated over three channels.
  """

  def __init__(self, n, size=0, where=''):
    self.n, self.size, self.where = n, size, where
    self.array = None

  def put(self, i, image):
    try:
      x = fit(image, self.size)
    except (ValueError, OSError) as e:
      raise UserError(f'{self.where}: example {i}: {e}') from None
    if self.array is None:
      self.array = np.zeros((self.n,) + x.shape, np.uint8)
    if x.shape[:2] != self.array.shape[1:3]:
      raise UserError(f'{self.where} holds images of different sizes ({self.array.shape[1]}x'
                      f'{self.array.shape[2]}, then {x.shape[0]}x{x.shape[1]} at example {i}); '
                      'pass --image_size=N to resize every image to NxN')
    if x.shape[-1] > self.array.shape[-1]:
      self.array = np.repeat(self.array, 3, axis=-1)
    self.array[i] = x  # a grey image broadcasts over an RGB stack's three channels

  def result(self):
    if self.array is None:
      raise UserError(f'{self.where} holds no images')
    return self.array


def same_channels(*arrays):
  """The arrays with grey ones repeated to RGB when any of them is RGB; arrays that are not
  all uint8 NHWC images (feature vectors, say) come back unchanged."""
  if not all(a.dtype == np.uint8 and a.ndim == 4 for a in arrays) or max(
      a.shape[-1] for a in arrays) == 1:
    return arrays
  return tuple(np.repeat(a, 3, axis=-1) if a.shape[-1] == 1 else a for a in arrays)
