"""Named blocks of a flat parameter vector: offsets, views and packing.

Samplers and optimisers work on flat parameter vectors (rows of a
``(n_chains, n_params)`` array for HMC, the ``x`` of L-BFGS for the
variational bound), while the model code wants the weight matrices.  A
:class:`ParameterLayout` lists the blocks of the vector once, by name and
shape in C order, and derives everything else from that list: the offset and
slice of every block, the number of parameters, views of a vector (with any
number of leading batch axes, or trailing ones when the parameter axis is
first) and the inverse, :meth:`ParameterLayout.pack`.
"""

from collections import namedtuple
from dataclasses import dataclass
from functools import cache
from math import prod

import numpy as np

__all__ = ["ParameterLayout"]


@cache
def _views_type(names):
    """The named-tuple class of the views of one list of block names.

    Built once per list and kept at module level (not on the layout), so that
    a layout pickles as its blocks alone.
    """
    return namedtuple("Blocks", names)


@dataclass(frozen=True)
class ParameterLayout:
    """Blocks of a flat parameter vector, by name and shape, in order.

    Block ``k`` occupies ``offsets[k]:offsets[k + 1]`` of the vector and holds
    an array of ``shapes[k]`` in C order.

    Parameters
    ----------
    blocks : tuple of (str, tuple of int)
        Name and shape of every block, in the order they are stored.  Names
        must be valid Python identifiers not starting with an underscore
        (they name the fields of :meth:`unpack`'s result) and distinct.

    Attributes
    ----------
    names : tuple of str
    shapes : tuple of tuple of int
    sizes : tuple of int
        Number of parameters of every block.
    offsets : tuple of int
        Start of every block, then the total: ``len(blocks) + 1`` values.
    n_params : int

    See Also
    --------
    ParameterLayout.of : The same, blocks given as keyword arguments.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield._layout import ParameterLayout
    >>> layout = ParameterLayout.of(W=(2, 3), b=(3,))
    >>> layout.offsets, layout.n_params
    ((0, 6, 9), 9)
    >>> theta = np.arange(2 * 9.0).reshape(2, 9)  # two chains
    >>> W, b = layout.unpack(theta)
    >>> W.shape, b[1].tolist()
    ((2, 2, 3), [15.0, 16.0, 17.0])
    >>> bool(np.array_equal(layout.pack(W=W, b=b), theta))
    True
    """

    blocks: tuple

    def __post_init__(self):
        blocks = tuple(
            (str(name), tuple(int(n) for n in shape)) for name, shape in self.blocks
        )
        names = [name for name, _ in blocks]
        if len(set(names)) != len(names):
            raise ValueError(f"block names must be distinct, got {names}")
        for name in names:
            if not name.isidentifier() or name.startswith("_"):
                raise ValueError(f"block name {name!r} is not a public identifier")
        for name, shape in blocks:
            if any(n < 0 for n in shape):
                raise ValueError(f"block {name!r} has a negative dimension {shape}")
        object.__setattr__(self, "blocks", blocks)
        # Derived once: samplers unpack vectors in their innermost loops.
        shapes = tuple(shape for _, shape in blocks)
        sizes = tuple(prod(shape) for shape in shapes)
        offsets = [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        derived = {
            "_names": tuple(names),
            "_shapes": shapes,
            "_sizes": sizes,
            "_offsets": tuple(offsets),
            "_slices": tuple(slice(a, b) for a, b in zip(offsets, offsets[1:])),
        }
        # Per block: its slice, its shape, and whether the slice already has
        # it (one-dimensional blocks of a last parameter axis).
        derived["_last_axis"] = tuple(
            (part, shape, len(shape) == 1)
            for part, shape in zip(derived["_slices"], shapes)
        )
        derived["_views"] = _views_type(tuple(names))
        for key, value in derived.items():
            object.__setattr__(self, key, value)

    @classmethod
    def of(cls, **blocks):
        """A layout from keyword arguments ``name=shape``, in the order given.

        Parameters
        ----------
        **blocks : tuple of int
            Shape of every block; an int is a one-dimensional block.

        Returns
        -------
        layout : ParameterLayout

        Examples
        --------
        >>> from sklearn_meanfield._layout import ParameterLayout
        >>> ParameterLayout.of(U=(4, 3), V=4).sizes
        (12, 4)
        """
        return cls(
            tuple(
                (name, (shape,) if isinstance(shape, (int, np.integer)) else shape)
                for name, shape in blocks.items()
            )
        )

    @property
    def names(self):
        return self._names

    @property
    def shapes(self):
        return self._shapes

    @property
    def sizes(self):
        return self._sizes

    @property
    def offsets(self):
        return self._offsets

    @property
    def n_params(self):
        return self._offsets[-1]

    def slice(self, name):
        """The slice of block ``name`` in the flat vector.

        Examples
        --------
        >>> from sklearn_meanfield._layout import ParameterLayout
        >>> ParameterLayout.of(W=(2, 3), b=(3,)).slice("b")
        slice(6, 9, None)
        """
        return self._slices[self._names.index(name)]

    def unpack(self, theta, axis=-1):
        """Views of every block of ``theta``, as a named tuple.

        Parameters
        ----------
        theta : ndarray
            Flat vectors along ``axis`` (of length ``n_params``); the other
            axes are batch axes (chains, draws, columns of a factor) and are
            kept, before or after the block's own shape.
        axis : int, default=-1
            The parameter axis.

        Returns
        -------
        blocks : named tuple of ndarray
            One field per block, in order; block ``k`` has ``theta``'s shape
            with ``axis`` replaced by ``shapes[k]``.  These are views:
            writing into them writes into ``theta`` (a reshape that splits one
            axis never copies).

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_meanfield._layout import ParameterLayout
        >>> layout = ParameterLayout.of(U=(2, 3), V=(2,))
        >>> F = np.zeros((8, 5))  # parameter axis first, 5 columns
        >>> views = layout.unpack(F, axis=0)
        >>> views.U.shape, views.V.shape
        ((2, 3, 5), (2, 5))
        >>> views.V[1] = 1.0
        >>> F[7].tolist()
        [1.0, 1.0, 1.0, 1.0, 1.0]
        """
        if axis == -1 and type(theta) is np.ndarray:
            # The common case, kept lean: samplers unpack in inner loops.
            before = theta.shape[:-1]
            if theta.shape[-1] == self._offsets[-1]:
                return self._views._make(
                    [
                        theta[..., part]
                        if flat
                        else theta[..., part].reshape(before + shape)
                        for part, shape, flat in self._last_axis
                    ]
                )
        theta = np.asarray(theta)
        axis = axis % theta.ndim
        if theta.shape[axis] != self._offsets[-1]:
            raise ValueError(
                f"axis {axis} of theta has length {theta.shape[axis]}, "
                f"the layout {self.n_params} parameters"
            )
        before, after = theta.shape[:axis], theta.shape[axis + 1 :]
        lead = (slice(None),) * axis
        return self._views._make(
            theta[lead + (part,)].reshape(before + shape + after)
            for part, shape in zip(self._slices, self._shapes)
        )

    def __reduce__(self):
        # Pickle the blocks alone; the derived attributes (and the views'
        # named-tuple class, which does not pickle) are rebuilt on load.
        return (type(self), (self.blocks,))

    def pack(self, blocks=None, /, **arrays):
        """Flat vectors from the blocks: the inverse of :meth:`unpack`.

        Parameters
        ----------
        blocks : mapping or named tuple, optional
            The blocks by name (e.g. the result of :meth:`unpack`).
        **arrays : array-like
            Or the blocks as keyword arguments.  Each block's trailing axes
            are broadcast to its shape and its leading axes are batch axes,
            broadcast with those of the other blocks (a scalar fills its
            block).

        Returns
        -------
        theta : ndarray of shape (*batch, n_params)
            Of the common dtype of the blocks.

        Examples
        --------
        >>> import numpy as np
        >>> from sklearn_meanfield._layout import ParameterLayout
        >>> layout = ParameterLayout.of(W=(2, 3), b=(3,))
        >>> # A value per row of W, broadcast along the row; b all 7.
        >>> layout.pack(W=np.array([[1], [2]]), b=7).tolist()
        [1, 1, 1, 2, 2, 2, 7, 7, 7]
        """
        if blocks is not None:
            arrays = dict(blocks._asdict() if hasattr(blocks, "_asdict") else blocks)
        if sorted(arrays) != sorted(self.names):
            raise ValueError(f"expected blocks {list(self.names)}, got {list(arrays)}")
        arrays = {name: np.asarray(arrays[name]) for name in self.names}
        batch = np.broadcast_shapes(
            *(
                arrays[name].shape[: max(arrays[name].ndim - len(shape), 0)]
                for name, shape in self.blocks
            )
        )
        dtype = np.result_type(*arrays.values())
        theta = np.empty(batch + (self.n_params,), dtype=dtype)
        for view, name in zip(self.unpack(theta), self.names):
            view[...] = arrays[name]
        return theta
