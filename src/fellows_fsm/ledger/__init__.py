"""The shared ledger on PostgreSQL (``[ledger]``): one budget across machines and people (issue 42).

Like journal/, a store: the only code that writes the ledger's SQL. schema.py applies its versioned migrations
(migrations/NNNN_*.sql) and refuses a newer schema; store.py holds the connection and every statement. It never
decides anything: driver/ledger.py asks it, core/budget.py says whether a run fits.
"""
