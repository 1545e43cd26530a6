-- The shared ledger, schema 1 (issue 42): one budget across machines and people.
-- Applied by fellows_fsm/ledger/schema.py in one transaction with its schema_version row.

-- One row per budget that reservations are serialized on: 'team:<team>', or 'user:<user>' for a user with no team.
-- A reservation locks its row (SELECT ... FOR UPDATE) for the length of its check and insert, so two machines
-- never pass one budget together.
CREATE TABLE budget_locks (
    scope_key text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Every paid handoff, from its reservation (its worst case, before the paid job is created) to its settlement
-- (what the run really ran and cost). state: reserved (lapses at lease_until unless renewed), created (the paid
-- job may exist: kept until its run is followed to its end), settled (gpu_hours/cost are the run's own),
-- released (never handed off: counts nothing).
CREATE TABLE reservations (
    id bigserial PRIMARY KEY,
    team text NOT NULL DEFAULT '',
    user_name text NOT NULL,
    machine text NOT NULL,
    journal text NOT NULL,
    dispatch_id text NOT NULL,
    lane text,
    gpus integer NOT NULL CHECK (gpus >= 0),
    limit_seconds double precision NOT NULL CHECK (limit_seconds >= 0),
    price_per_gpu_hour double precision,
    worst_gpu_hours double precision NOT NULL CHECK (worst_gpu_hours >= 0),
    worst_cost double precision,
    state text NOT NULL CHECK (state IN ('reserved', 'created', 'released', 'settled')),
    reserved_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL,
    created_at timestamptz,
    ended_at timestamptz,
    gpu_hours double precision,
    cost double precision,
    status text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (machine, journal, dispatch_id)
);
CREATE INDEX reservations_team_window ON reservations (team, reserved_at);
CREATE INDEX reservations_user_window ON reservations (user_name, reserved_at);
CREATE INDEX reservations_open ON reservations (machine, journal) WHERE state IN ('reserved', 'created');

-- Each free job's GPU-hours at its end (written once the job-end work reports them to the ledger).
CREATE TABLE free_runs (
    id bigserial PRIMARY KEY,
    team text NOT NULL DEFAULT '',
    user_name text NOT NULL,
    machine text NOT NULL,
    journal text NOT NULL,
    dispatch_id text NOT NULL,
    job_id text NOT NULL,
    lane text NOT NULL,
    gpus integer NOT NULL,
    gpu_hours double precision NOT NULL,
    result text,
    ended_at timestamptz NOT NULL,
    UNIQUE (machine, journal, dispatch_id, job_id)
);
CREATE INDEX free_runs_team_window ON free_runs (team, ended_at);
