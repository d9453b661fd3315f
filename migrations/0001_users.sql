-- Device users: the people who sign in from the app clients (HTTP Basic or a JWT).
-- Passwords are bcrypt hashes; a disabled user cannot sign in.
CREATE TABLE users (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                text        NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9._@-]{1,64}$'),
    password_hash       text        NOT NULL,
    disabled            boolean     NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now(),
    password_changed_at timestamptz NOT NULL DEFAULT now()
);
