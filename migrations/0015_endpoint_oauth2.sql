-- outbox 0015: OAuth2 client-credentials auth for HTTP endpoints (docs/guides/endpoints.md,
-- "OAuth2"). The worker fetches an access token from oauth2_token_url (client id and secret
-- by HTTP Basic, RFC 6749 section 4.4) and sends it as "Authorization: Bearer".
-- OAuth2 is configured when oauth2_token_url IS NOT NULL; then the client id and the client
-- secret are set too (all three or none). oauth2_client_secret is sealed with
-- OUTBOX_SECRET_KEY like the signing secrets (never shown, re-sealed by
-- `outbox secrets reencrypt`); the other three are shown by the CLI, the API and the pages.
--
-- Locks: ALTER TABLE endpoints takes ACCESS EXCLUSIVE on endpoints until commit. The
-- nullable columns without a default are catalog-only; the CHECKs scan endpoints once (a
-- small table) and hold for every existing row (all four are NULL).
-- Bound the wait for the lock as for 0004: PGOPTIONS='-c lock_timeout=3s' outbox migrate

ALTER TABLE endpoints
    ADD COLUMN IF NOT EXISTS oauth2_token_url text,
    ADD COLUMN IF NOT EXISTS oauth2_client_id text,
    ADD COLUMN IF NOT EXISTS oauth2_client_secret text,
    ADD COLUMN IF NOT EXISTS oauth2_scope text,
    ADD CONSTRAINT endpoints_oauth2_complete CHECK (
        (oauth2_token_url IS NULL) = (oauth2_client_id IS NULL)
        AND (oauth2_token_url IS NULL) = (oauth2_client_secret IS NULL)
        AND (oauth2_scope IS NULL OR oauth2_token_url IS NOT NULL)),
    ADD CONSTRAINT endpoints_oauth2_token_url_bounds
        CHECK (oauth2_token_url ~ '^https?://[^[:space:][:cntrl:]]+$'
               AND char_length(oauth2_token_url) <= 2048),
    ADD CONSTRAINT endpoints_oauth2_client_id_bounds
        CHECK (oauth2_client_id ~ '^[ -~]+$' AND char_length(oauth2_client_id) <= 1024),
    -- sealed ("enc:v1:..." of at most 4,096 characters) or, without a key, plain
    ADD CONSTRAINT endpoints_oauth2_client_secret_bounds
        CHECK (char_length(oauth2_client_secret) BETWEEN 1 AND 8192),
    ADD CONSTRAINT endpoints_oauth2_scope_bounds
        CHECK (oauth2_scope ~ '^[!#-[\]-~]+( [!#-[\]-~]+)*$'
               AND char_length(oauth2_scope) <= 1024),
    -- one auth scheme per endpoint: basic/bearer (0014's auth_kind) or OAuth2, never both
    -- (each sets the Authorization header); outbox.admin.endpoints refuses it first
    ADD CONSTRAINT endpoints_one_auth_scheme
        CHECK (auth_kind IS NULL OR oauth2_token_url IS NULL);
