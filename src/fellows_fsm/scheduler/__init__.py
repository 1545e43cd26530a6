"""The scheduler port: its protocol and values, a job's script as sbatch reads it, and the in-memory fake."""
