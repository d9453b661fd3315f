import HeraldStorage
import Hummingbird

/// Device sign-in for a route whose write confirms the sign-in itself (the device `PUT`): a
/// sign-in the ``DeviceAuthenticator``'s caches remember is set as the context's
/// ``HeraldRequestContext/rememberedIdentity``, not checked against the user's row; any other
/// is checked as usual and set as ``HeraldRequestContext/identity``. Refusals are the
/// authenticator's (401 with its challenges).
///
/// The route must confirm a remembered sign-in before it answers anything but success: by a
/// statement that checks the user's row as it writes (``DeviceStore/registerHeld(_:id:as:)``),
/// or with ``DeviceAuthenticator/confirm(request:context:)``. Every other device route
/// signs in through ``DeviceAuthenticator`` and never sees a remembered sign-in.
struct RememberingDeviceSignIn: RouterMiddleware {
    typealias Context = HeraldRequestContext

    let authenticator: DeviceAuthenticator

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var context = context
        switch try await authenticator.signIn(request: request, context: context) {
        case .confirmed(let owner): context.identity = owner
        case .remembered(let remembered): context.rememberedIdentity = remembered
        }
        return try await next(request, context)
    }
}
