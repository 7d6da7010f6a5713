-- outbox 0014: endpoint credentials (docs/guides/endpoint-auth.md): secret headers, an
-- auth scheme, and a TLS client certificate. Every secret here is sealed with
-- OUTBOX_SECRET_KEY like the signing secret (outbox._security.secretbox), re-sealed by
-- `outbox secrets reencrypt`, read only by the worker and by ping, never shown.
--
-- Locks: ALTER TABLE endpoints takes ACCESS EXCLUSIVE on endpoints until commit,
-- catalog-only (nullable columns and a constant default: no rewrite; the CHECKs scan the
-- table once, and endpoints is small). Bound the wait as for 0004:
-- PGOPTIONS='-c lock_timeout=3s' outbox migrate

-- Secret headers: secret_header_values is {"Name": "<sealed value>"}, each value sealed on
-- its own, so an update merges them in SQL like the plain headers; secret_headers holds
-- their names (the same statement writes both), which is all that is ever shown.
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS secret_header_values jsonb NOT NULL
    DEFAULT '{}';
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS secret_headers text[] NOT NULL DEFAULT '{}';

-- Endpoint auth: one scheme per endpoint. auth_kind names it; auth_secret holds its
-- sealed secret: 'basic' "user:password", 'bearer' the token. 'oauth2' (client
-- credentials) is allowed here for the migration that adds its own columns (token URL,
-- client id, sealed client secret, scope); that migration states what auth_secret holds
-- for it, and may replace this CHECK. NULL auth_kind: no auth, and no auth_secret.
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS auth_kind text;
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS auth_secret text;
ALTER TABLE endpoints ADD CONSTRAINT endpoints_auth_kind_check CHECK (
    auth_kind IS NULL AND auth_secret IS NULL
    OR auth_kind IN ('basic', 'bearer') AND auth_secret IS NOT NULL
    OR auth_kind = 'oauth2');

-- Mutual TLS: the client certificate chain and its private key (PEM), both sealed; both or
-- neither. The certificate's subject and expiry are kept in clear for show and the API.
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS tls_client_cert text;
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS tls_client_key text;
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS tls_client_cert_subject text;
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS tls_client_cert_expires_at timestamptz;
ALTER TABLE endpoints ADD CONSTRAINT endpoints_tls_client_check CHECK (
    (tls_client_cert IS NULL) = (tls_client_key IS NULL));
