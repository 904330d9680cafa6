/* contrib/postgresql/memlimits--0.3.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION memlimits" to load this file. \quit

-- One row per backend of the cluster (with memlimits.cluster_limit set;
-- otherwise the calling backend only): its heap as libmemlimits measures
-- it, and the held estimate of the statement it is running (0 when idle).
CREATE FUNCTION memlimits_activity(
    OUT pid integer,
    OUT heap_bytes bigint,
    OUT statement_held_bytes bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'memlimits_activity'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

-- The Prometheus text format (0.0.4) for the cluster: statements started
-- and interrupted in every backend since the server started, each
-- backend's heap (with memlimits.cluster_limit set; otherwise the calling
-- backend's), the cluster limit and its usage, the calling session's
-- statement limits (docs/postgresql.md, "Metrics").
CREATE FUNCTION memlimits_metrics()
RETURNS text
AS 'MODULE_PATHNAME', 'memlimits_metrics'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;
