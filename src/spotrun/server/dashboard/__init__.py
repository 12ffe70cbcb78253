"""The web dashboard: static pages and scripts that call the user API (/api/v1) with the user's token."""

from spotrun.server.dashboard.router import create_dashboard_router

__all__ = ["create_dashboard_router"]
