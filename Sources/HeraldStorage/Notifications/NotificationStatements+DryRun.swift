import Foundation
import PostgresNIO

/// Dry runs (``NotificationStore/dryRun(_:sender:batch:now:)``, a campaign's preview): reads
/// only, run in a read-only transaction (``readOnlySnapshot``), so that nothing they do can write.
extension NotificationStatements {
    /// The first statement of a dry run's transaction: one snapshot for all its reads, and
    /// PostgreSQL refuses any write in it.
    static let readOnlySnapshot: PostgresQuery = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

    /// The body each hub send would carry, in input order: the notification's content (as its
    /// row would store it, `jsonb`) read with the expression of the attempt's start
    /// (``StartAttempts``): the native text, or the template parameters as `jsonb` writes them.
    static func payloads(contents: [String], formats: [String]) -> PostgresQuery {
        """
        SELECT CASE WHEN s.format = 'template' THEN (s.content::jsonb -> 'template')::text
                    ELSE s.content::jsonb ->> s.format END
        FROM unnest(\(contents)::text[], \(formats)::text[]) WITH ORDINALITY AS s(content, format, n)
        ORDER BY s.n
        """
    }

    /// A live device's tags as the hub matches them: its own (`username:`, `tz:` included),
    /// Herald's marker, and `$InstallationId:{…}` for an installation.
    private static let hubTags = """
        d.tags || ARRAY['herald-device:' || d.id::text]
               || CASE WHEN d.installation_id IS NULL THEN '{}'::text[]
                       ELSE ARRAY['$InstallationId:{' || d.installation_id || '}'] END
        """

    /// Whether the tags `t.tags` match one of the conjuncts of `a.conjuncts` (a JSON array of
    /// `{"all": [...], "none": [...]}`).
    private static let matchesConjuncts = """
        EXISTS (SELECT 1 FROM jsonb_array_elements(a.conjuncts::jsonb) c
                WHERE t.tags @> ARRAY(SELECT jsonb_array_elements_text(c -> 'all'))
                  AND NOT t.tags && ARRAY(SELECT jsonb_array_elements_text(c -> 'none')))
        """

    /// Live devices matching each audience `indexes[i]`'s `conjuncts[i]`, by platform: index,
    /// platform, count. Reads every live device once (the registry has no index on tags).
    static func registryCounts(indexes: [Int64], conjuncts: [String]) -> PostgresQuery {
        """
        SELECT a.i, d.platform, count(*)::int8
        FROM unnest(\(indexes)::int8[], \(conjuncts)::text[]) AS a(i, conjuncts)
        JOIN devices d ON d.deleted_at IS NULL AND d.platform IS NOT NULL
        CROSS JOIN LATERAL (SELECT \(unescaped: hubTags) AS tags) t
        WHERE \(unescaped: matchesConjuncts)
        GROUP BY 1, 2
        """
    }

    /// ``registryCounts(indexes:conjuncts:)`` for audiences each of whose conjuncts names a
    /// `username:` tag: only the devices of the users `users[i]` (a JSON array of names) are
    /// read (`devices_user`). A `username:` tag is reserved, so only its user's devices carry it.
    static func registryCounts(indexes: [Int64], conjuncts: [String], users: [String]) -> PostgresQuery {
        """
        SELECT a.i, d.platform, count(*)::int8
        FROM unnest(\(indexes)::int8[], \(conjuncts)::text[], \(users)::text[]) AS a(i, conjuncts, users)
        JOIN users u ON u.name IN (SELECT jsonb_array_elements_text(a.users::jsonb))
        JOIN devices d ON d.user_id = u.id AND d.deleted_at IS NULL AND d.platform IS NOT NULL
        CROSS JOIN LATERAL (SELECT \(unescaped: hubTags) AS tags) t
        WHERE \(unescaped: matchesConjuncts)
        GROUP BY 1, 2
        """
    }

    /// The live device with handle `handles[i]` on `platforms[i]`, for each index: index,
    /// platform, count (`devices_live_handle`).
    static func registryCounts(indexes: [Int64], handles: [String], platforms: [String]) -> PostgresQuery {
        """
        SELECT a.i, d.platform, count(*)::int8
        FROM unnest(\(indexes)::int8[], \(handles)::text[], \(platforms)::text[]) AS a(i, handle, platform)
        JOIN devices d ON d.handle = a.handle AND d.platform = a.platform AND d.deleted_at IS NULL
        GROUP BY 1, 2
        """
    }
}
