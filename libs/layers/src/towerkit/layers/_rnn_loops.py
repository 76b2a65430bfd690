"""Recurrent loops over time: static_rnn (unrolled), dynamic_rnn and its bidirectional form."""

from __future__ import annotations

from typing import Any

from towerkit.layers._rnn_cells import cell_label, check_state, static_shape, zeros_like_sizes
from towerkit.layers._rnn_fused import fused_applies, fused_stack
from towerkit.layers._rnn_nest import flatten, map_structure, pack_as
from towerkit.towers.compat import tf1


def _require_cell(fn: str, cell: Any) -> None:
    if not (callable(cell) and hasattr(cell, "state_size") and hasattr(cell, "output_size")):
        msg = (
            f"{fn}: 'cell' must be a recurrent cell (callable, with state_size and "
            f"output_size); got {type(cell).__name__}"
        )
        raise TypeError(msg)


def _batch_size(flat: list[Any], axis: int) -> Any:
    for x in flat:
        d = x.shape.as_list()[axis]
        if d is not None:
            return int(d)
    return tf1.shape(flat[0])[axis]


def _check_floating(fn: str, cell: Any, flat: list[Any]) -> None:
    """TypeError unless every input is floating point (a cell multiplies them by its weights)."""
    bad = [
        f"#{i}: {x.dtype.base_dtype.name}" for i, x in enumerate(flat) if not x.dtype.is_floating
    ]
    if bad:
        msg = (
            f"{fn} with {cell_label(cell)}: the inputs must be floating point (float16, "
            f"bfloat16, float32 or float64); got {', '.join(bad)}: cast them "
            "(tf.cast(x, tf.float32)), or look integer ids up in an embedding first"
        )
        raise TypeError(msg)


def _initial_state(fn: str, cell: Any, state: Any, batch: Any, dtype: Any) -> Any:
    if state is not None:
        what = f"initial state given to {fn}"
        check_state(cell, state, what=what, batch=batch if isinstance(batch, int) else None)
        if isinstance(batch, int):
            return state
        label = cell_label(cell)

        def checked(t: Any) -> Any:  # a batch known only when the graph runs
            if not hasattr(t, "shape"):
                return t
            check = tf1.debugging.assert_equal(
                tf1.shape(t)[0],
                batch,
                message=f"{label}: the {what} must have one row per example of the inputs",
            )
            with tf1.control_dependencies([check]):
                return tf1.identity(t)

        return map_structure(checked, state)
    if dtype is None:
        msg = f"{fn} with {cell_label(cell)}: give 'initial_state' or 'dtype'; got neither"
        raise ValueError(msg)
    return cell.zero_state(batch, dtype)


def _sequence_length(fn: str, cell: Any, sequence_length: Any, batch: Any, inputs: Any) -> Any:
    if sequence_length is None:
        return None
    lengths = tf1.cast(sequence_length, tf1.int32)
    known = isinstance(batch, int)
    if lengths.shape.rank not in (None, 1) or (
        known and lengths.shape.rank == 1 and lengths.shape.as_list()[0] not in (None, batch)
    ):
        msg = (
            f"{fn} with {cell_label(cell)}: 'sequence_length' must be a vector of one length "
            f"per example, shape [{batch if known else 'batch'}], for inputs of shape "
            f"{static_shape(inputs)}; got shape {static_shape(lengths)}"
        )
        raise ValueError(msg)
    check = tf1.debugging.assert_equal(
        tf1.shape(lengths),
        tf1.reshape(batch, [1]),
        message=f"{fn} with {cell_label(cell)}: 'sequence_length' must hold one length per example",
    )
    with tf1.control_dependencies([check]):
        return tf1.identity(lengths, name="sequence_length")


def _where(done: Any, old: Any, new: Any) -> Any:
    return map_structure(lambda a, b: tf1.where(done, a, b), old, new)


def _zero_output(cell: Any, batch: Any, dtype: Any) -> Any:
    return zeros_like_sizes(cell.output_size, batch, dtype)


def static_rnn(
    cell: Any,
    inputs: Any,
    initial_state: Any = None,
    dtype: Any = None,
    sequence_length: Any = None,
    scope: Any = None,
) -> tuple[list[Any], Any]:
    """The cell unrolled over a Python list of steps (each ``[batch, depth]``).

    Variables live in variable scope `scope` (default ``rnn``). With
    `sequence_length` (a ``[batch]`` vector), outputs past an example's length are
    zeros and its state stays as it was after its last step.

    Returns:
        ``(outputs, state)``: the list of outputs, one per step, and the final state.

    Raises:
        TypeError: `inputs` is not a list or tuple, or `cell` is not a cell.
        ValueError: `inputs` is empty, a step is not ``[batch, depth]``, no `dtype`
            and no `initial_state`, or `sequence_length` is not ``[batch]``.

    .. versionadded:: 0.2
    """
    _require_cell("static_rnn", cell)
    if not isinstance(inputs, (list, tuple)):
        msg = f"static_rnn: 'inputs' must be a list of [batch, depth] steps; got {type(inputs)}"
        raise TypeError(msg)
    if not inputs:
        msg = "static_rnn: 'inputs' must hold at least one step; got an empty list"
        raise ValueError(msg)
    with tf1.variable_scope(scope or "rnn") as varscope:
        if varscope.caching_device is None:
            varscope.set_caching_device(lambda op: op.device)
        first = [tf1.convert_to_tensor(x) for x in flatten(inputs[0])]
        for x in first:
            if x.shape.rank != 2:
                msg = (
                    f"static_rnn with {cell_label(cell)}: each step must be [batch, depth]; "
                    f"got shape {static_shape(x)}"
                )
                raise ValueError(msg)
        _check_floating("static_rnn", cell, first)
        batch = _batch_size(first, 0)
        state = _initial_state("static_rnn", cell, initial_state, batch, dtype)
        lengths = _sequence_length("static_rnn", cell, sequence_length, batch, first[0])
        out_dtype = flatten(state)[0].dtype
        zero = _zero_output(cell, batch, out_dtype) if lengths is not None else None
        outputs = []
        for time, x in enumerate(inputs):
            if time > 0:
                varscope.reuse_variables()
            output, new_state = cell(x, state)
            if lengths is not None:
                done = time >= lengths
                output = _where(done, zero, output)
                new_state = _where(done, state, new_state)
            outputs.append(output)
            state = new_state
        return outputs, state


def _to_time_major(x: Any) -> Any:
    return tf1.transpose(x, [1, 0, *range(2, x.shape.rank)])


def dynamic_rnn(
    cell: Any,
    inputs: Any,
    sequence_length: Any = None,
    initial_state: Any = None,
    dtype: Any = None,
    parallel_iterations: int | None = None,
    swap_memory: bool = False,
    time_major: bool = False,
    scope: Any = None,
) -> tuple[Any, Any]:
    """The cell run over time in a ``tf.compat.v1.while_loop``.

    `inputs` is ``[batch, time, depth]`` (``[time, batch, depth]`` when `time_major`),
    or a nested structure of such tensors. Variables live in variable scope `scope`
    (default ``rnn``). With `sequence_length` (``[batch]``), outputs past an
    example's length are zeros, its state stays as after its last step, and the loop
    stops after the longest sequence.

    Returns:
        ``(outputs, state)``: outputs shaped as the inputs' batch and time axes (same
        major axis) and the final state.

    Raises:
        TypeError: `cell` is not a cell.
        ValueError: an input has rank under 3, or the cell and inputs disagree on the
            batch size, or no `dtype` and no `initial_state`, or `sequence_length` is
            not ``[batch]``, or `initial_state` is not shaped as ``cell.state_size``.

    .. versionadded:: 0.2
    """
    _require_cell("dynamic_rnn", cell)
    with tf1.variable_scope(scope or "rnn") as varscope:
        if varscope.caching_device is None:
            varscope.set_caching_device(lambda op: op.device)
        flat = [tf1.convert_to_tensor(x) for x in flatten(inputs)]
        layout = "[time, batch, depth]" if time_major else "[batch, time, depth]"
        for x in flat:
            if x.shape.rank is None or x.shape.rank < 3:
                msg = (
                    f"dynamic_rnn with {cell_label(cell)}: the inputs must be {layout} "
                    f"(time_major={time_major}); got shape {static_shape(x)}"
                )
                raise ValueError(msg)
        _check_floating("dynamic_rnn", cell, flat)
        if not time_major:
            flat = [_to_time_major(x) for x in flat]
        batch = _batch_size(flat, 1)
        lengths = _sequence_length("dynamic_rnn", cell, sequence_length, batch, flat[0])
        state = _initial_state("dynamic_rnn", cell, initial_state, batch, dtype)
        layers = fused_applies(cell, pack_as(inputs, flat), state, lengths)
        if layers is not None:
            outputs, final = _fused_loop(
                cell, layers, flat[0], state, lengths, parallel_iterations or 32, swap_memory
            )
        else:
            outputs, final = _dynamic_loop(
                cell,
                pack_as(inputs, flat),
                state,
                lengths,
                parallel_iterations or 32,
                swap_memory,
            )
        if not time_major:
            outputs = map_structure(_to_time_major, outputs)
        return outputs, final


def _fused_loop(
    cell: Any,
    plan: Any,
    x: Any,
    state: Any,
    lengths: Any,
    parallel_iterations: int,
    swap_memory: bool,
) -> tuple[Any, Any]:
    static_steps = x.shape.as_list()[0]
    steps = int(static_steps) if static_steps is not None else tf1.shape(x)[0]
    outputs, final = fused_stack(
        cell, plan, x, state, lengths, steps, parallel_iterations, swap_memory
    )
    outputs.set_shape([static_steps, x.shape[1], cell.output_size])
    return outputs, final


def _dynamic_loop(
    cell: Any,
    inputs: Any,
    state: Any,
    lengths: Any,
    parallel_iterations: int,
    swap_memory: bool,
) -> tuple[Any, Any]:
    flat = flatten(inputs)
    static_steps = flat[0].shape.as_list()[0]
    steps = int(static_steps) if static_steps is not None else tf1.shape(flat[0])[0]
    batch = _batch_size(flat, 1)
    static_batch = batch if isinstance(batch, int) else None
    out_sizes = flatten(cell.output_size)
    out_dtype = flatten(state)[0].dtype
    zero = _zero_output(cell, batch, out_dtype) if lengths is not None else None
    with tf1.name_scope("dynamic_rnn") as ns:
        time = tf1.constant(0, dtype=tf1.int32, name="time")
        input_tas = [
            tf1.TensorArray(
                x.dtype, size=steps, element_shape=x.shape[1:], tensor_array_name=f"{ns}input_{k}"
            ).unstack(x)
            for k, x in enumerate(flat)
        ]
        output_tas = [
            tf1.TensorArray(
                out_dtype,
                size=steps,
                element_shape=[static_batch, size],
                tensor_array_name=f"{ns}output_{k}",
            )
            for k, size in enumerate(out_sizes)
        ]
    if lengths is not None:
        bound = tf1.minimum(steps, tf1.maximum(1, tf1.reduce_max(lengths)))
    else:
        bound = steps

    def step(time: Any, tas: Any, state: Any) -> tuple[Any, Any, Any]:
        xs = []
        for ta, x in zip(input_tas, flat, strict=True):
            xt = ta.read(time)
            xt.set_shape(x.shape[1:])
            xs.append(xt)
        output, new_state = cell(pack_as(inputs, xs), state)
        if lengths is not None:
            done = time >= lengths
            output = _where(done, zero, output)
            new_state = _where(done, state, new_state)
        new_state = pack_as(state, flatten(new_state))
        tas = [ta.write(time, o) for ta, o in zip(tas, flatten(output), strict=True)]
        return time + 1, tas, new_state

    _, final_tas, final_state = tf1.while_loop(
        lambda time, *_: time < bound,
        step,
        (time, output_tas, state),
        parallel_iterations=parallel_iterations,
        maximum_iterations=steps,
        swap_memory=swap_memory,
    )
    outs = []
    for ta, size in zip(final_tas, out_sizes, strict=True):
        o = ta.stack()
        o.set_shape([static_steps, static_batch, size])
        outs.append(o)
    return pack_as(cell.output_size, outs), final_state


def _reverse(x: Any, lengths: Any, time_axis: int, batch_axis: int) -> Any:
    if lengths is None:
        return tf1.reverse(x, axis=[time_axis])
    return tf1.reverse_sequence(x, seq_lengths=lengths, seq_axis=time_axis, batch_axis=batch_axis)


def bidirectional_dynamic_rnn(
    cell_fw: Any,
    cell_bw: Any,
    inputs: Any,
    sequence_length: Any = None,
    initial_state_fw: Any = None,
    initial_state_bw: Any = None,
    dtype: Any = None,
    parallel_iterations: int | None = None,
    swap_memory: bool = False,
    time_major: bool = False,
    scope: Any = None,
) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """`cell_fw` run forward and `cell_bw` backward over the same inputs (`dynamic_rnn`).

    Variables live in ``bidirectional_rnn/fw/`` and ``bidirectional_rnn/bw/`` (or
    under `scope`). The backward pass reverses each sequence within its length (all
    of it without `sequence_length`), and its outputs are reversed back, so both
    outputs line up in time.

    Returns:
        ``((output_fw, output_bw), (state_fw, state_bw))``.

    Raises:
        TypeError: a cell is not a cell.
        ValueError: as `dynamic_rnn`.

    .. versionadded:: 0.2
    """
    _require_cell("bidirectional_dynamic_rnn", cell_fw)
    _require_cell("bidirectional_dynamic_rnn", cell_bw)
    with tf1.variable_scope(scope or "bidirectional_rnn"):
        with tf1.variable_scope("fw") as fw_scope:
            out_fw, state_fw = dynamic_rnn(
                cell_fw,
                inputs,
                sequence_length=sequence_length,
                initial_state=initial_state_fw,
                dtype=dtype,
                parallel_iterations=parallel_iterations,
                swap_memory=swap_memory,
                time_major=time_major,
                scope=fw_scope,
            )
        time_axis, batch_axis = (0, 1) if time_major else (1, 0)
        lengths = None if sequence_length is None else tf1.cast(sequence_length, tf1.int64)
        with tf1.variable_scope("bw") as bw_scope:
            reversed_inputs = map_structure(
                lambda x: _reverse(tf1.convert_to_tensor(x), lengths, time_axis, batch_axis),
                inputs,
            )
            tmp, state_bw = dynamic_rnn(
                cell_bw,
                reversed_inputs,
                sequence_length=sequence_length,
                initial_state=initial_state_bw,
                dtype=dtype,
                parallel_iterations=parallel_iterations,
                swap_memory=swap_memory,
                time_major=time_major,
                scope=bw_scope,
            )
    out_bw = map_structure(lambda x: _reverse(x, lengths, time_axis, batch_axis), tmp)
    return (out_fw, out_bw), (state_fw, state_bw)
