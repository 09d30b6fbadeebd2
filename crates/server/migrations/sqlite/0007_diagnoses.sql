-- Diagnosis jobs (POST /api/v1/diagnose): the job document, stored after every step.
CREATE TABLE diagnoses (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    destination TEXT NOT NULL,
    state TEXT NOT NULL,
    created_us BIGINT NOT NULL,
    document TEXT NOT NULL
);
CREATE INDEX diagnoses_created ON diagnoses (created_us);
