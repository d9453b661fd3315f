import Crypto
import HeraldDomain
import HeraldStorage
import Hummingbird
import HummingbirdAuth
import Logging

/// Signs device users in: `Authorization: Basic` against the users table (bcrypt, with a
/// short-lived cache of verified credentials) or `Authorization: Bearer <JWT>` when a JWT key
/// is configured. On success the request context's `identity` is the ``DeviceOwner``; on any
/// failure the request ends with 401, `WWW-Authenticate` challenges and a JSON reason that
/// does not say which part was wrong.
///
/// Basic sign-ins that need bcrypt are bounded per client address (``ClientAddress``): a share of
/// the bcrypt queue (``PasswordChecker``) and a budget of failures per minute (``ClientLimits``),
/// both answered with 429 and `Retry-After`; a credential that just failed is refused from
/// memory (``RecentFailures``).
///
/// Never logs the header, the password or the token.
struct DeviceAuthenticator: AuthenticatorMiddleware {
    typealias Context = HeraldRequestContext
    typealias Identity = DeviceOwner

    /// What one bcrypt check decided.
    enum Verdict: Sendable {
        case accepted(DeviceOwner)
        /// Unknown user, no password, or a wrong one: remembered in ``RecentFailures``.
        case wrongCredential
        /// The right password of a disabled user: not remembered, so enabling takes effect at once.
        case disabled
    }

    let users: UserStore
    let passwords: PasswordChecker
    let cache: BasicCredentialCache
    let failures: RecentFailures
    let limits: ClientLimits
    let tokens: TokenVerifier
    let unauthorized: APIError
    let inFlight = SingleFlight<SHA256.Digest, Verdict>()

    init(
        users: UserStore, passwords: PasswordChecker, cache: BasicCredentialCache, failures: RecentFailures,
        limits: ClientLimits, tokens: TokenVerifier
    ) {
        self.users = users
        self.passwords = passwords
        self.cache = cache
        self.failures = failures
        self.limits = limits
        self.tokens = tokens
        var challenges = HTTPFields()
        challenges[values: .wwwAuthenticate] =
            [#"Basic realm="herald""#] + (tokens.isEnabled ? [#"Bearer realm="herald""#] : [])
        self.unauthorized = APIError(
            .unauthorized, code: "unauthorized",
            message: tokens.isEnabled
                ? "sign in with a valid user name and password (Basic) or token (Bearer)"
                : "sign in with a valid user name and password (Basic)",
            headers: challenges)
    }

    func authenticate(request: Request, context: Context) async throws -> DeviceOwner? {
        let values = request.headers[values: .authorization]
        switch AuthorizationHeader(values: values) {
        case .basic(let user, let password):
            return try await basic(user: user, password: password, header: values[0], context: context)
        case .bearer(let token):
            return try await bearer(token, context: context)
        case .invalid:
            context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "missing or malformed header"])
            throw unauthorized
        }
    }

    /// Basic: a cache hit still re-reads the user's row (one indexed query) and holds only
    /// while the credential version matches and the user is enabled; a credential that failed
    /// moments ago is refused at once; otherwise, within the client's failure budget, a bcrypt
    /// check (the same cost for unknown users and users without a password) whose queue place is
    /// reserved before the user's row is read.
    private func basic(user: String, password: String, header: String, context: Context) async throws -> DeviceOwner {
        let key = BasicCredentialCache.key(forHeader: header)
        var row: UserCredential??
        if let cached = cache.lookup(key) {
            let current = try await users.credential(name: user)
            if let current, current.id == cached.userID, current.credentialVersion == cached.credentialVersion,
                !current.disabled
            {
                return DeviceOwner(id: current.id, name: current.name)
            }
            cache.remove(key)
            row = .some(current)
        }
        if failures.contains(key) {
            context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "basic credentials failed moments ago"])
            throw unauthorized
        }
        let client = ClientAddress(context.remoteAddress)
        try limits.checkBudget(client)
        // Concurrent requests with the same header (an app's parallel calls, or every client of
        // one user right after the cache entry expired) share one bcrypt check.
        let verdict = try await inFlight.run(key) { [users, passwords, cache, row] () async throws -> Verdict in
            // The queue place first: a full queue (or a client holding its share) is answered
            // before the database is asked for the user.
            try await passwords.withSlot(for: client) { slot in
                let credential: UserCredential?
                if let row { credential = row } else { credential = try await users.credential(name: user) }
                let matches = try await slot.verify(password, hash: credential?.passwordHash)
                guard matches, let credential else { return .wrongCredential }
                guard !credential.disabled else { return .disabled }
                cache.insert(key, .init(userID: credential.id, credentialVersion: credential.credentialVersion))
                return .accepted(DeviceOwner(id: credential.id, name: credential.name))
            }
        }
        switch verdict {
        case .accepted(let owner):
            return owner
        case .wrongCredential:
            failures.insert(key)
        case .disabled:
            break
        }
        limits.recordFailure(client)
        context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "basic credentials not accepted"])
        throw unauthorized
    }

    /// Bearer: a verified JWT names the user in `sub`; a user seen for the first time is added
    /// without a password; a disabled one is refused, and so is a subject whose name differs
    /// only in case from an existing user's.
    private func bearer(_ token: String, context: Context) async throws -> DeviceOwner {
        guard tokens.isEnabled else {
            context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "bearer tokens not configured"])
            throw unauthorized
        }
        let subject: String
        do {
            subject = try await tokens.subject(of: token)
        } catch {
            let reason = (error as? TokenVerifier.Refusal)?.description ?? "\(type(of: error))"
            context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "token: \(reason)"])
            throw unauthorized
        }
        guard let name = try? UserName.validated(subject) else {
            context.logger.debug(
                "herald.auth.refused", metadata: ["auth.reason": "token subject is no valid user name"])
            throw unauthorized
        }
        let user: UserCredential
        do {
            user = try await users.externalUser(name: name)
        } catch let error as DomainError where error.kind == .conflict {
            // Another user's name differs only in case: never sign in as them, never a second user.
            context.logger.notice(
                "herald.auth.refused", metadata: ["auth.reason": "token subject differs only in case from a user"])
            throw unauthorized
        }
        guard !user.disabled else {
            context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "user disabled"])
            throw unauthorized
        }
        return DeviceOwner(id: user.id, name: user.name)
    }
}
