-- A role the agent reads with: it may connect and SELECT, nothing else.
CREATE ROLE reader LOGIN PASSWORD 'reader-secret';
REVOKE ALL ON DATABASE legacy FROM PUBLIC;
GRANT CONNECT ON DATABASE legacy TO reader;
GRANT USAGE ON SCHEMA public TO reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO reader;
ALTER ROLE reader SET default_transaction_read_only = on;
