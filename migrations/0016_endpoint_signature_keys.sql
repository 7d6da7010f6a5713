-- outbox 0016: asymmetric (Ed25519, Standard Webhooks "v1a") signatures per endpoint
-- (docs/guides/signatures.md). An ed25519 endpoint keeps its whsk_ secret key sealed in
-- endpoints.secret (and previous_secret during a rotation's grace), exactly where an hmac
-- endpoint keeps its whsec_ secret, so the claim, rotation and `outbox secrets reencrypt`
-- treat both alike. Its whpk_ public keys are public: stored in clear, shown and served.
--
-- Locks: ALTER TABLE endpoints takes ACCESS EXCLUSIVE on endpoints until commit,
-- catalog-only (a column with a constant default and nullable ones: no rewrite; the CHECK
-- constraints scan endpoints once, which is small). Bound the wait for the lock as for 0004:
-- PGOPTIONS='-c lock_timeout=3s' outbox migrate
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS signature text NOT NULL DEFAULT 'hmac';
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS public_key text;
-- the public key of previous_secret (an ed25519 one), while previous_secret signs
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS previous_public_key text;

-- (a CHECK passes on NULL: the IS NOT NULL makes a missing ed25519 public key fail it)
ALTER TABLE endpoints DROP CONSTRAINT IF EXISTS endpoints_signature_check;
ALTER TABLE endpoints ADD CONSTRAINT endpoints_signature_check CHECK (
    (signature = 'hmac' AND public_key IS NULL)
    OR (signature = 'ed25519' AND public_key IS NOT NULL AND public_key LIKE 'whpk\_%'));
