"""From measurements to conclusions: the machine model, cache levels and link fits, findings,
and the machine models of datasheet cards."""
