# Card-hour quotas (c.WorkspaceQuota.*): GPU time per calendar month, workspaces
# at once, largest workspace, total disk; per-group overrides (most generous
# wins) and per-user ones. Every start is checked before anything is created;
# a periodic task in the hub warns users whose card-hours run out and stops
# their GPU servers after the grace. Usage: `workspacespawner usage -f <this config>`.
import os
import secrets

from workspacespawner.quota.announce import with_quota_announcements

c.WorkspaceQuota.card_hours_per_month = 50  # one GPU for one hour = 1 card-hour
c.WorkspaceQuota.max_concurrent = 2
c.WorkspaceQuota.max_disk = "50Gi"  # home plus VM root disks
c.WorkspaceQuota.group_limits = {
    "students": {"card_hours_per_month": 20, "max_gpus": 1},
    "research": {"card_hours_per_month": 500, "max_concurrent": 4, "max_disk": "500Gi"},
}
c.WorkspaceQuota.timezone = "Europe/Berlin"  # months start at midnight of the 1st there
c.WorkspaceQuota.grace_period = 900  # seconds GPU servers keep running once the card-hours ran out
c.WorkspaceQuota.contact = "the platform team (gpu-help@example.edu)"
# The ledger: a SQLite file next to the hub's database, or the hub's own PostgreSQL:
# c.WorkspaceQuota.ledger_url = "postgresql+psycopg://jupyterhub:...@db/jupyterhub"
c.WorkspaceQuota.ledger_url = "sqlite:///workspacespawner-ledger.sqlite"

# The enforcer and the idle-GPU pass (45-gpu-idle.py) stop servers through the
# hub's REST API as this service; the idle-GPU pass also lists the active users
# with their groups and servers' activity (one request a pass).
# Set WORKSPACESPAWNER_QUOTA_TOKEN (z2jh: from a Kubernetes Secret) to keep one
# token across restarts; otherwise a new one is made at every start.
quota_token = os.environ.get("WORKSPACESPAWNER_QUOTA_TOKEN") or secrets.token_hex(32)
c.JupyterHub.services.append({"name": "workspacespawner-quota", "api_token": quota_token})
c.JupyterHub.load_roles.append(
    {"name": "workspacespawner-quota", "scopes": ["delete:servers", "read:servers", "list:users", "read:users:groups", "read:users:activity"],
     "services": ["workspacespawner-quota"]}
)
c.WorkspaceQuota.hub_api_token = quota_token

# Each user's quota warnings on the hub's home page (the site's own announcement_home is kept).
c.JupyterHub.template_vars = with_quota_announcements(c.JupyterHub.template_vars)
