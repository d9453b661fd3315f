import ArgumentParser
import Foundation
import HeraldRuntime
import HeraldStorage
import HummingbirdBcrypt

/// `heraldctl users`: the device users who sign in from the app clients.
struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage device users (the people who sign in from the apps).",
        subcommands: [List.self, Add.self, Disable.self, Enable.self, SetPassword.self],
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
