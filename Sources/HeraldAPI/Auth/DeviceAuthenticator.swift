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
/// Basic sign-ins that need bcrypt are bounded per client address (``ClientAddress``, as
/// ``TrustedProxies`` resolves it): a share of
/// the bcrypt queue (``PasswordChecker``) and a budget of failures per minute (``ClientLimits``),
/// both answered with 429 and `Retry-After`; a credential that just failed is refused from
/// memory (``RecentFailures``).
///
/// The device `PUT` signs in through ``RememberingDeviceSignIn`` instead, which hands a sign-in
/// the caches hold to the route unconfirmed, for the write's own statement to confirm; the
/// route falls back on ``confirm(request:context:)`` whenever that write does not happen.
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
    /// Bearer tokens' users as last read, by the token's subject (not the token): what
    /// ``signIn(request:context:)`` hands on unconfirmed. The Basic cache's size and lifetime.
    let subjects: BasicCredentialCache
    let failures: RecentFailures
    let limits: ClientLimits
    let proxies: TrustedProxies
    let tokens: TokenVerifier
    let unauthorized: APIError
    let inFlight = SingleFlight<SHA256.Digest, Verdict>()

    init(
        users: UserStore, passwords: PasswordChecker, cache: BasicCredentialCache, failures: RecentFailures,
        limits: ClientLimits, proxies: TrustedProxies = TrustedProxies(), tokens: TokenVerifier
    ) {
        self.users = users
        self.passwords = passwords
        self.cache = cache
        self.subjects = cache.emptyCopy()
        self.failures = failures
        self.limits = limits
        self.proxies = proxies
        self.tokens = tokens
        var challenges = HTTPFields()
        challenges[values: .wwwAuthenticate] =
            [#"Basic realm="herald""#] + (tokens.isEnabled ? [#"Bearer realm="herald""#] : [])
        self.unauthorized = APIError(
            .unauthorized, code: .unauthorized,
            message: tokens.isEnabled
                ? "sign in with a valid user name and password (Basic) or token (Bearer)"
                : "sign in with a valid user name and password (Basic)",
            headers: challenges)
    }

    func authenticate(request: Request, context: Context) async throws -> DeviceOwner? {
        let values = request.headers[values: .authorization]
        switch AuthorizationHeader(values: values) {
        case .basic(let user, let password):
            return try await basic(
                user: user, password: password, header: values[0], headers: request.headers, context: context)
        case .bearer(let token):
            return try await bearerUser(try await subject(of: token, context: context), context: context)
        case .invalid:
            context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "missing or malformed header"])
            throw unauthorized
        }
    }

    /// What a sign-in decided without reading the user's row.
    enum SignIn: Sendable {
        /// Checked against the user's row for this request (a cache miss).
        case confirmed(DeviceOwner)
        /// A Basic credential or a verified token's subject the caches remember: the user as
        /// last read, still to be confirmed (enabled, same credential version) by the statement
        /// that acts for them, or by ``confirm(request:context:)``.
        case remembered(RememberedOwner)
    }

    /// ``authenticate(request:context:)``, except that a cache hit is not checked against the
    /// user's row here but handed on as ``SignIn/remembered(_:)``. A token is verified (its
    /// signature, expiry and claims) on every request all the same.
    func signIn(request: Request, context: Context) async throws -> SignIn {
        let values = request.headers[values: .authorization]
        switch AuthorizationHeader(values: values) {
        case .basic:
            if let hit = cache.lookup(BasicCredentialCache.key(forHeader: values[0])) {
                return .remembered(hit.remembered)
            }
        case .bearer(let token):
            let name = try await subject(of: token, context: context)
            if let hit = subjects.lookup(BasicCredentialCache.key(forHeader: name)) { return .remembered(hit.remembered) }
            return .confirmed(try await bearerUser(name, context: context))
        case .invalid:
            break
        }
        return .confirmed(try await confirm(request: request, context: context))
    }

    /// ``authenticate(request:context:)``, which reads the user's row, for a route holding a
    /// remembered sign-in its write did not confirm.
    func confirm(request: Request, context: Context) async throws -> DeviceOwner {
        guard let owner = try await authenticate(request: request, context: context) else { throw unauthorized }
        return owner
    }

    /// Basic: a cache hit still re-reads the user's row (one indexed query) and holds only
    /// while the credential version matches and the user is enabled; a credential that failed
    /// moments ago is refused at once; otherwise, within the client's failure budget, a bcrypt
    /// check (the same cost for unknown users and users without a password) whose queue place is
    /// reserved before the user's row is read.
    private func basic(
        user: String, password: String, header: String, headers: HTTPFields, context: Context
    ) async throws -> DeviceOwner {
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
        let client = proxies.client(peer: context.remoteAddress, headers: headers)
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
                cache.insert(key, CachedSignIn(credential))
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

    /// Bearer: a verified JWT names the user in `sub` (a valid user name).
    private func subject(of token: String, context: Context) async throws -> String {
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
        return name
    }

    /// Bearer: the user a token's subject names; one seen for the first time is added without
    /// a password; a disabled one is refused, and so is a subject whose name differs only in
    /// case from an existing user's.
    private func bearerUser(_ name: String, context: Context) async throws -> DeviceOwner {
        let key = BasicCredentialCache.key(forHeader: name)
        let user: UserCredential
        do {
            user = try await users.externalUser(name: name)
        } catch let error as DomainError where error.kind == .conflict {
            // Another user's name differs only in case: never sign in as them, never a second user.
            context.logger.notice(
                "herald.auth.refused", metadata: ["auth.reason": "token subject differs only in case from a user"])
            subjects.remove(key)
            throw unauthorized
        }
        guard !user.disabled else {
            subjects.remove(key)
            context.logger.debug("herald.auth.refused", metadata: ["auth.reason": "user disabled"])
            throw unauthorized
        }
        subjects.insert(key, CachedSignIn(user))
        return DeviceOwner(id: user.id, name: user.name)
    }
}
