"""The Airflow Asset of each Delta table, so other DAGs can schedule on a table millpond writes."""

from __future__ import annotations

from airflow.sdk import Asset

ASSET_SCHEME = "x-millpond"


def table_asset(table_id: str) -> Asset:
    """The Airflow Asset of one Delta table: other DAGs schedule on `Asset(name="delta.<layer>.<table>")`.

    The identity is the table, not where the lake is: `x-millpond://<layer>/<table>`, never the lake's path. Airflow
    keeps one active asset per name and per URI, so a URI holding `$MILLPOND_LAKE` made a second lake (or a moved one)
    against the same metadata database an inactive asset, and every task naming it failed. An `x-` scheme is one no
    provider claims: Airflow stores it as written (airflow.sdk.definitions.asset._sanitize_uri).
    """
    layer, name = table_id.split(".")
    return Asset(name=f"delta.{table_id}", uri=f"{ASSET_SCHEME}://{layer}/{name}", group="delta")
