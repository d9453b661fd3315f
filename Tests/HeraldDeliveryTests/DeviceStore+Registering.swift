import HeraldDomain
import HeraldStorage

extension DeviceStore {
    /// Registers a device from its parts: builds the ``DeviceRegistration`` as the device API
    /// does (the default ``TagPolicy``), then saves it.
    @discardableResult
    func register(
        owner: DeviceOwner, id: DeviceID, platform: Platform, handle: String, clientTags: [String],
        template: DeviceTemplate?
    ) async throws -> DeviceRecord {
        let registration = try DeviceRegistration(
            user: owner.name, platform: platform, handle: handle, clientTags: clientTags, template: template,
            policy: TagPolicy())
        return try await register(registration, id: id, owner: owner)
    }

    /// Registers an installation from its parts: builds the ``InstallationRegistration`` as
    /// the device API does (the default ``TagPolicy``), then saves it.
    @discardableResult
    func registerInstallation(
        owner: DeviceOwner, installationID: String, platform: Platform, handle: String, clientTags: [String],
        templates: [String: InstallationTemplateSpec]
    ) async throws -> DeviceRecord {
        let installation = try InstallationRegistration(
            user: owner.name, installationID: try InstallationID(installationID), platform: platform, handle: handle,
            clientTags: clientTags, templates: templates, policy: TagPolicy())
        return try await registerInstallation(installation, owner: owner)
    }
}
