import HeraldDomain
import HeraldStorage
import NotificationHubs

/// How a device row becomes what the hub stores: one registration (native, or template when
/// the device has a template) or one installation. Both carry the device's tags and its
/// ``HubMarker`` (`herald-device:<id>`), which says Herald wrote it.
enum DeviceHubMapping {
    /// The tags the hub holds for `device`: its own, then its marker.
    static func hubTags(for device: DeviceRecord) -> [String] {
        device.tags + [HubMarker.tag(for: device.id)]
    }

    /// The registration of a registration-style device, at the hub id `registrationID` (nil: a
    /// new registration, the hub picks the id).
    static func registration(for device: DeviceRecord, platform: Platform, registrationID: String?) -> Registration {
        let channel: RegistrationChannel
        switch platform {
        case .apns: channel = .apple(deviceToken: device.handle)
        case .fcmv1: channel = .fcmV1(token: device.handle)
        case .wns: channel = .windows(channelURI: device.handle)
        }
        // Template headers were checked when the device was stored: `X-WNS-*` on WNS (with
        // `X-WNS-Type`), none on APNs and FCM v1.
        let template = device.template.map { RegistrationTemplate(body: $0.body, headers: $0.headers) }
        return Registration(
            channel: channel, tags: hubTags(for: device), template: template, registrationID: registrationID)
    }

    /// The installation of an installation-style device: its tags (`username:<user>`
    /// included) and its named templates with their own tags.
    static func installation(for device: DeviceRecord, platform: Platform, installationID: String) -> Installation {
        let pushPlatform: PushPlatform
        switch platform {
        case .apns: pushPlatform = .apns
        case .fcmv1: pushPlatform = .fcmV1
        case .wns: pushPlatform = .wns
        }
        let templates = device.templates.mapValues { spec in
            InstallationTemplate(
                body: spec.body, headers: spec.headers.isEmpty ? nil : spec.headers,
                tags: spec.tags.isEmpty ? nil : spec.tags)
        }
        return Installation(
            id: installationID, platform: pushPlatform, pushChannel: device.handle, tags: hubTags(for: device),
            templates: templates.isEmpty ? nil : templates)
    }

    /// Whether `registration` is one of the hidden registrations the hub keeps for an
    /// installation (tagged `$InstallationId:{…}`): those go with their installation and are
    /// never deleted one by one.
    static func isInstallationBacked(_ registration: Registration) -> Bool {
        registration.tags.contains { $0.hasPrefix("$InstallationId:") }
    }

    /// Whether `registration` is for `handle` (APNs tokens compare ignoring case, as the hub
    /// stores them upper-case).
    static func registration(_ registration: Registration, holds handle: String) -> Bool {
        let held = registration.channel.handle
        if case .apple = registration.channel { return held.uppercased() == handle.uppercased() }
        return held == handle
    }
}
