import ArgumentParser
import Foundation
import HeraldDomain
import HeraldRuntime
import HeraldStorage
import HummingbirdBcrypt

/// `heraldctl users`: the device users who sign in from the app clients.
struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage device users (the people who sign in from the apps).",
        subcommands: [
            List.self, Add.self, Disable.self, Enable.self, SetPassword.self, SetTimeZone.self, RetagZones.self,
        ],
        defaultSubcommand: List.self
    )

    /// The shortest password accepted.
    static let minimumPasswordLength = 8
    /// bcrypt reads at most 72 bytes; longer passwords would be silently truncated.
    static let maximumPasswordBytes = 72

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List users.")

        func run() async throws {
            await withDatabase { ctl in
                let users = try await ctl.stores.users.list()
                for user in users {
                    var notes: [String] = []
                    if user.disabled { notes.append("disabled") }
                    if !user.hasPassword { notes.append("external (JWT only)") }
                    let suffix = notes.isEmpty ? "" : "  (\(notes.joined(separator: ", ")))"
                    print("\(user.name)\(suffix)")
                }
                if users.isEmpty { print("no users; add one with `heraldctl users add NAME`") }
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a user. The password is read from a prompt, or from standard input with --password-stdin.")

        @Argument(help: "User name: 1 to 64 ASCII letters, digits and . _ @ -")
        var name: String

        @OptionGroup var password: PasswordInput

        func run() async throws {
            await password.withHash { ctl, hash in
                try await ctl.stores.users.add(name: name, passwordHash: hash)
                print("added user \(name)")
            }
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Disable a user: sign-ins fail at once, cached ones included. Devices stay registered.")

        @Argument var name: String

        func run() async throws {
            await setDisabled(name, true)
        }
    }

    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Enable a disabled user again.")

        @Argument var name: String

        func run() async throws {
            await setDisabled(name, false)
        }
    }

    struct SetPassword: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-password", abstract: "Replace a user's password; cached sign-ins with the old one stop working.")

        @Argument var name: String

        @OptionGroup var password: PasswordInput

        func run() async throws {
            await password.withHash { ctl, hash in
                guard try await ctl.stores.users.setPassword(name: name, passwordHash: hash) else {
                    throw CommandFailure("no user named \(name)")
                }
                print("password of \(name) changed")
            }
        }
    }
}

extension Users {
    struct SetTimeZone: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-timezone",
            abstract:
                "Set a user's time zone (an IANA name such as Europe/Paris), or clear it with --clear; their devices get the zone's tz: tag at the hub."
        )

        @Argument(help: "The user's name, exactly as stored.")
        var name: String

        @Argument(help: "An IANA zone such as Europe/Paris (omit with --clear).")
        var zone: String?

        @Flag(help: "Clear the user's zone: HERALD_DEFAULT_TIME_ZONE applies.")
        var clear = false

        func validate() throws {
            if clear, zone != nil { throw ValidationError("give a zone or --clear, not both") }
            if !clear, zone == nil { throw ValidationError("give a zone (such as Europe/Paris) or --clear") }
            if let zone {
                do { _ = try TimeZoneName.validate(zone) } catch { throw ValidationError(error.reason) }
            }
        }

        func run() async throws {
            await withDatabase { ctl in
                guard let user = try await ctl.stores.devices.setTimeZone(userName: name, zone: clear ? nil : zone) else {
                    throw CommandFailure("no user named \(name)")
                }
                let effective = user.timeZone ?? ctl.storage.defaultTimeZone
                print(
                    user.timeZone == nil
                        ? "cleared the time zone of \(user.name) (the default \(effective) applies: \(ZoneTag.tag(forZone: effective)))"
                        : "time zone of \(user.name) set to \(effective) (\(ZoneTag.tag(forZone: effective)))")
            }
        }
    }

    struct RetagZones: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retag-zones",
            abstract:
                "Give every live device the tz: tag of its user's zone (or HERALD_DEFAULT_TIME_ZONE) where it differs, and resync those devices (workers do this at start)."
        )

        func run() async throws {
            await withDatabase { ctl in
                let count = try await ctl.stores.devices.retagZones()
                print("retagged \(count) device(s)")
            }
        }
    }
}

/// The password of `users add` and `users set-password`: from a prompt, or the first line of
/// standard input; hashed with the configured bcrypt cost.
struct PasswordInput: ParsableArguments {
    @Flag(help: "Read the password from the first line of standard input (for scripts).")
    var passwordStdin = false

    /// Reads the password, connects, and runs `body` with its hash.
    func withHash(_ body: @escaping @Sendable (Ctl, String) async throws -> Void) async {
        let password = readPassword(fromStdin: passwordStdin)
        await withDatabase { ctl in
            try await body(ctl, Bcrypt.hash(password, cost: UInt8(ctl.storage.bcryptCost)))
        }
    }
}

private func setDisabled(_ name: String, _ disabled: Bool) async {
    await withDatabase { ctl in
        guard try await ctl.stores.users.setDisabled(name: name, disabled) else {
            throw CommandFailure("no user named \(name)")
        }
        print(disabled ? "disabled \(name)" : "enabled \(name)")
    }
}

/// Reads a password from standard input or a prompt without echo, and checks its length.
/// Exits with one line on stderr when it is unusable.
private func readPassword(fromStdin: Bool) -> String {
    let password: String
    if fromStdin {
        password = readLine(strippingNewline: true) ?? ""
    } else {
        guard let first = getpass("Password: ").map({ String(cString: $0) }),
            let second = getpass("Repeat password: ").map({ String(cString: $0) })
        else {
            HeraldExit.fail("heraldctl", CommandFailure("could not read a password from the terminal; use --password-stdin"))
        }
        guard first == second else { HeraldExit.fail("heraldctl", CommandFailure("the passwords do not match")) }
        password = first
    }
    guard password.count >= Users.minimumPasswordLength, password.utf8.count <= Users.maximumPasswordBytes else {
        HeraldExit.fail(
            "heraldctl",
            CommandFailure(
                "a password must be at least \(Users.minimumPasswordLength) characters and at most \(Users.maximumPasswordBytes) bytes"
            ))
    }
    return password
}

/// A command that cannot do what was asked; printed as one line.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
