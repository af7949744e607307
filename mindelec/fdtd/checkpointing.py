"""Time-segment checkpointing of differentiable runs.

:func:`run_checkpointed` splits a run into segments of ``ceil(sqrt(steps))`` steps, each one autograd
node (:class:`_Segment`): the forward pass runs them in place without a graph and stores only each
segment's starting state; the backward pass recomputes one segment at a time out of place and
back-propagates through it. Memory for the backward pass grows like ``sqrt(steps)``, and the cost is
about one extra forward pass.

A segment's inputs are the flattened :class:`~mindelec.fdtd.state.YeeState`, the monitors' accumulators
(:attr:`Recorder.accumulators <mindelec.fdtd.monitors.Recorder.accumulators>`) and the coefficient
tensors that require grad; its outputs are the state and accumulators at its end, then the samples the
recorders took at each of its steps.
"""

import math

import torch


def run_checkpointed(stepper, state, recorders, steps, after_segment):
    """Run ``steps`` steps of ``stepper`` from ``state`` in checkpointed segments.

    Args:
        stepper: the :class:`~mindelec.fdtd.updates.YeeStepper`.
        state: the initial :class:`~mindelec.fdtd.state.YeeState`.
        recorders: the run's started :class:`~mindelec.fdtd.monitors.Recorder` objects; their
            accumulators are the graph-connected outputs of the last segment when this returns.
        steps: the number of steps.
        after_segment: called as ``after_segment(state, steps_done, count)`` after each segment.

    Returns:
        ``(state, samples)``: the final state and, per recorder, its samples (one list per step).
    """
    parameters = stepper.coefficient_tensors()
    segment_length = max(1, math.ceil(math.sqrt(steps)))
    state_count = len(state.tensors())
    samples = [[] for _ in recorders]
    values = tuple(state.tensors()) + _accumulators(recorders)
    for start in range(0, steps, segment_length):
        count = min(segment_length, steps - start)
        segment = _segment(stepper, parameters, state, recorders, start, count)
        outputs = _Segment.apply(segment, *values, *parameters)
        values, flat = outputs[: len(values)], list(outputs[len(values) :])
        for step in range(start, start + count):
            for recorder, recorded in zip(recorders, samples):
                n = recorder.count(step)
                recorded.append(flat[:n])
                flat = flat[n:]
        after_segment(state.with_tensors(values[:state_count]), start + count, count)
    _assign_accumulators(recorders, values[state_count:])
    return state.with_tensors(values[:state_count]), samples


def _accumulators(recorders):
    return tuple(value for recorder in recorders for value in recorder.accumulators)


def _assign_accumulators(recorders, tensors):
    """Hand ``tensors`` (in :func:`_accumulators`' order) back to the recorders."""
    offset = 0
    for recorder in recorders:
        count = len(recorder.accumulators)
        recorder.accumulators = tuple(tensors[offset : offset + count])
        offset += count


def _segment(stepper, parameters, template, recorders, start, count):
    """The function of one segment: ``run(tensors, inplace) -> tensors`` (see the module docstring)."""
    state_count = len(template.tensors())
    carried = state_count + len(_accumulators(recorders))

    def run(tensors, inplace):
        current = list(tensors[:carried])
        if inplace:
            current = [value.clone() for value in current]
        _assign_accumulators(recorders, current[state_count:])
        state = template.with_tensors(current[:state_count])
        local = stepper.with_coefficients(parameters, tensors[carried:])
        samples = []
        for step in range(start, start + count):
            state = local.step(state, step, inplace=inplace)
            for recorder in recorders:
                samples.extend(recorder.record(state.fields, step, inplace))
        return tuple(state.tensors()) + _accumulators(recorders) + tuple(samples)

    return run


class _Segment(torch.autograd.Function):
    """A run of consecutive steps that stores only its inputs and recomputes itself in the backward pass.

    Forward: the steps run in place under ``no_grad`` (on copies of the input state). Backward: they run
    again out of place with grad enabled, and ``torch.autograd.grad`` carries the output gradients back to
    the input state and the coefficient tensors. One graph node per segment, so both the stored tensors and
    the autograd bookkeeping grow like the number of segments, ``sqrt(steps)``.
    """

    @staticmethod
    def forward(ctx, run, *tensors):
        ctx.run = run
        ctx.save_for_backward(*tensors)
        with torch.no_grad():
            return run(tensors, inplace=True)

    @staticmethod
    def backward(ctx, *output_gradients):
        needs = ctx.needs_input_grad[1:]
        inputs = [t.detach().requires_grad_(need) for t, need in zip(ctx.saved_tensors, needs)]
        with torch.enable_grad():
            outputs = ctx.run(inputs, inplace=False)
        pairs = [
            (output, gradient)
            for output, gradient in zip(outputs, output_gradients)
            if gradient is not None and output.requires_grad
        ]
        wanted = [t for t in inputs if t.requires_grad]
        gradients = iter(
            torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
            if pairs and wanted
            else [None] * len(wanted)
        )
        return (None,) + tuple(next(gradients) if t.requires_grad else None for t in inputs)
