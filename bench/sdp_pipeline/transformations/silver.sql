-- Silver: recordings with a device and a time, the first row per (Device, Index, Recorded_At).
CREATE MATERIALIZED VIEW silver_activity AS
SELECT Recorded_At, Device, `Index`, Model, `User`, gt, x, y, z, _source_file, _ingested_at
FROM (
  SELECT *, row_number() OVER (PARTITION BY Device, `Index`, Recorded_At ORDER BY _source_file) AS _n
  FROM bronze_activity
  WHERE Device IS NOT NULL AND Recorded_At IS NOT NULL
)
WHERE _n = 1;
