-- The shared ledger, schema 2 (issue 42, `status --team`): what each driver last published of its live dispatches.
-- A driver replaces its own journal's rows (its live set) at most every 30 s and when it stops; `published_at` (the
-- server's clock) says how old a row is.
CREATE TABLE live_dispatches (
    team text NOT NULL DEFAULT '',
    user_name text NOT NULL,
    machine text NOT NULL,
    journal text NOT NULL,
    dispatch_id text NOT NULL,
    name text NOT NULL DEFAULT '',
    state text NOT NULL,
    label text NOT NULL,
    lane text NOT NULL,
    qos text,
    outcome text NOT NULL DEFAULT '',
    published_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (machine, journal, dispatch_id)
);
CREATE INDEX live_dispatches_team ON live_dispatches (team, user_name);
