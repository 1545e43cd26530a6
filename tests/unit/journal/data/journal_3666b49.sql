BEGIN TRANSACTION;
CREATE TABLE dispatches (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    intent TEXT NOT NULL,
    lane TEXT NOT NULL,
    pinned INTEGER NOT NULL,
    spec TEXT NOT NULL,
    ladder TEXT NOT NULL,
    state TEXT NOT NULL,
    label TEXT NOT NULL,
    qos TEXT,
    job_id TEXT,
    final INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL DEFAULT '',
    updated_at REAL NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}'
);
INSERT INTO "dispatches" VALUES('aaaa00000001',1700000000.0,'prod','gcp',1,'{"name": "train", "script": "/home/u/train.sbatch", "gpus": 8, "time_limit_seconds": null, "extra_args": [], "workdir": null}','[]','HANDED_OFF','HANDED_OFF',NULL,NULL,1,'handed-off',1700000005.0,'{"fallback": null}');
INSERT INTO "dispatches" VALUES('bbbb00000002',1700000010.0,'prod','gcp',1,'{"name": "train", "script": "/home/u/train.sbatch", "gpus": 8, "time_limit_seconds": null, "extra_args": [], "workdir": null}','[]','HANDING_OFF','HANDING_OFF',NULL,NULL,0,'',1700000010.0,'{"fallback": null}');
INSERT INTO "dispatches" VALUES('cccc00000003',1700000020.0,'prod','gcp',1,'{"name": "train", "script": "/home/u/train.sbatch", "gpus": 8, "time_limit_seconds": null, "extra_args": [], "workdir": null}','[]','HANDOFF_FAILED','HANDOFF_FAILED',NULL,NULL,1,'handoff-failed',1700000022.0,'{"fallback": null}');
INSERT INTO "dispatches" VALUES('dddd00000004',1700000030.0,'prod','gcp',1,'{"name": "train", "script": "/home/u/train.sbatch", "gpus": 8, "time_limit_seconds": null, "extra_args": [], "workdir": null}','[]','WITHDRAWN','WITHDRAWN',NULL,NULL,1,'withdrawn',1700000031.0,'{"fallback": null}');
CREATE TABLE handoffs (
    dispatch_id TEXT PRIMARY KEY REFERENCES dispatches(id),
    lane TEXT NOT NULL,
    argv TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    exit_status INTEGER,
    stdout TEXT,
    stderr TEXT,
    status TEXT NOT NULL,
    pid INTEGER
);
INSERT INTO "handoffs" VALUES('aaaa00000001','gcp','["gcloud", "batch", "jobs", "submit", "fsm-aaaa00000001"]',1700000001.0,1700000005.0,0,'job created
','','done',4242);
INSERT INTO "handoffs" VALUES('bbbb00000002','gcp','["gcloud", "batch", "jobs", "submit", "fsm-bbbb00000002"]',1700000011.0,NULL,NULL,NULL,NULL,'started',4343);
INSERT INTO "handoffs" VALUES('cccc00000003','gcp','["gcloud", "batch", "jobs", "submit", "fsm-cccc00000003"]',1700000021.0,1700000022.0,1,'','ERROR: quota exceeded
','failed',NULL);
CREATE TABLE jobs (
    dispatch_id TEXT NOT NULL REFERENCES dispatches(id),
    rung_index INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (dispatch_id, rung_index)
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    dispatch_id TEXT NOT NULL REFERENCES dispatches(id),
    at REAL NOT NULL,
    source TEXT NOT NULL,
    dest TEXT NOT NULL,
    trigger TEXT NOT NULL,
    rung_index INTEGER NOT NULL,
    qos TEXT NOT NULL,
    job_id TEXT,
    reason TEXT,
    note TEXT NOT NULL
);
CREATE INDEX transitions_by_dispatch ON transitions(dispatch_id, seq);
DELETE FROM "sqlite_sequence";
COMMIT;
PRAGMA user_version=3;
