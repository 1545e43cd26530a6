"""How dispatches look to a user: renderables, JSON objects and diagram text, which the CLI prints.

One module per view: ``words`` (times, durations, pending reasons), ``snapshot`` (one dispatch as seen now, and as
JSON), ``table`` (the fast fixed-width table), ``status``, ``history``, ``live`` (the live panel and watch table),
``ladder`` (the ladder against the grants) and ``paths`` (a dispatch's path drawn on the state diagram). They read
values (journal rows, steps, a Dispatch read but never driven); none of them polls SLURM or writes the journal.
"""
