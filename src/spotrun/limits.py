"""Bounds of a job, and of the store's ids, that the CLI's options hold to as well as the job spec and the API, in a
module of their own: the spec package builds its models when it is imported, and `spotrun --help` shows the bounds
without them."""

# $/h: no instance costs more. The cap on every price a user gives (a job file's, `spotrun simulate`'s options): a job
# priced at 1e308 $/h had the fleet's totals overflow to inf, and their difference to NaN, on /metrics.
MAX_PRICE_PER_HOUR = 1e6
MAX_NODES = 4096  # the largest gang spotrun plans for; each node is an attempt row per launch
MAX_ID = 2**31 - 1  # the store's ids are 32-bit integers in PostgreSQL (an option or query parameter naming one)
DEFAULT_AUDIT_EVENTS = 100  # the audit log's events shown at once (`spotrun audit`, GET /api/v1/audit), unless asked
MAX_AUDIT_EVENTS = 1000  # at most; older ones are paged with `--before-id` / `before_id`
