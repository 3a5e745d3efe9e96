import Foundation
import _ContextStackCore

/// A position in a store's history: the point just after one transaction.
///
/// Tokens order transactions (`<`), survive being stored anywhere (`Codable`), and resume:
/// `stack.history(after: token)` returns every transaction after it exactly once, oldest first.
///
/// ```swift
/// let transactions = try stack.history(after: savedToken)
/// savedToken = transactions.last?.token ?? savedToken
/// UserDefaults.standard.set(try JSONEncoder().encode(savedToken), forKey: "token")
/// ```
///
/// A token belongs to the store that made it; comparing tokens of two stores means nothing.
public struct HistoryToken: Codable, Comparable, Hashable, Sendable, CustomStringConvertible {
    /// SQLite: the transaction's number, in commit order. PostgreSQL: the ID of the database
    /// transaction that wrote it (see Docs/History.md for why that order is safe to resume from).
    package let position: Int64
    /// Orders the commits that one database transaction wrote (group commit); 0 on SQLite.
    package let sequence: Int64

    package init(position: Int64, sequence: Int64 = 0) {
        self.position = position
        self.sequence = sequence
    }

    public static func < (lhs: HistoryToken, rhs: HistoryToken) -> Bool {
        (lhs.position, lhs.sequence) < (rhs.position, rhs.sequence)
    }

    public var description: String { sequence == 0 ? "\(position)" : "\(position).\(sequence)" }
}

/// One saved commit, as the store's history recorded it.
public struct HistoryTransaction: Sendable, CustomStringConvertible {
    /// Where the transaction sits in the history: pass it to `history(after:)` to resume after it.
    public let token: HistoryToken
    /// When it was written (the writer's clock).
    public let date: Date
    /// The `author:` of the context whose update made the commit, or `nil`.
    public let author: String?
    /// What it changed, one entry per object.
    public let changes: [HistoryChange]

    package init(token: HistoryToken, date: Date, author: String?, changes: [HistoryChange]) {
        self.token = token
        self.date = date
        self.author = author
        self.changes = changes
    }

    public var description: String {
        "HistoryTransaction(\(token), author: \(author ?? "nil"), changes: \(changes.count))"
    }
}

/// What one transaction did to one object.
public struct HistoryChange: Hashable, Sendable, CustomStringConvertible {
    /// Inserted, updated or deleted.
    public enum Kind: String, Hashable, Sendable {
        case insert, update, delete
    }

    public let kind: Kind
    public let objectID: ObjectID
    /// The object's entity (a sub-entity by its own name).
    public let entityName: String
    /// For an update, the attributes and relationships it changed; empty otherwise.
    public let changedKeys: Set<String>

    package init(kind: Kind, objectID: ObjectID, entityName: String, changedKeys: Set<String>) {
        self.kind = kind
        self.objectID = objectID
        self.entityName = entityName
        self.changedKeys = changedKeys
    }

    public var description: String {
        kind == .update ? "\(kind) \(objectID) \(changedKeys.sorted())" : "\(kind) \(objectID)"
    }
}

/// Why the history cannot answer.
public struct HistoryError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable { case expired, notTracked }
        private let base: Base
        /// Transactions after the token were deleted (`deleteHistory(before:)`): the history
        /// cannot say everything that happened since. Fetch the current state again, then
        /// follow the history from `stack.lastHistoryToken()`.
        public static let expired = Code(base: .expired)
        /// The stack's store does not track history: add it with `tracksHistory: true`.
        public static let notTracked = Code(base: .notTracked)
        public var description: String { base.rawValue }
    }

    public let code: Code
    public let message: String

    package init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

/// What travels with a commit besides its changes: who made it, and — once written with
/// history — where it sits in the history.
package struct CommitInfo: Sendable {
    /// The `author:` of the context that made the commit.
    package var author: String?
    /// The raw `ContextID` of the context the commit was started from.
    package var origin: UInt64 = 0
    /// Set once the commit is written by a store that tracks history.
    package var token: HistoryToken?

    package init(author: String? = nil, origin: UInt64 = 0) {
        self.author = author
        self.origin = origin
    }
}

/// A commit as objects: which were inserted, which updated (with the keys that changed, a
/// many-to-many change counting for both objects under their relationships' names), which
/// deleted. What `Commit` reports and what history records, computed once here.
package struct ChangeSummary: Sendable {
    package var inserted: [(id: ObjectID, entity: EntityDescription)] = []
    package var updated: [(id: ObjectID, entity: EntityDescription, keys: Set<String>)] = []
    package var deleted: [(id: ObjectID, entity: EntityDescription)] = []

    package init() {}

    package init(_ changes: ChangeSet) {
        inserted = changes.inserts.map { ($0.id, $0.row.entity.description_) }
        deleted = changes.deletes.map { ($0.id, $0.entity.description_) }
        var position: [ObjectID: Int] = [:]
        for update in changes.updates {
            let keys = Set(update.slots.map { update.entity.properties[$0].name })
            if let index = position[update.id] {
                updated[index].keys.formUnion(keys)
            } else {
                position[update.id] = updated.count
                updated.append((update.id, update.entity.description_, keys))
            }
        }
        if !deleted.isEmpty && !updated.isEmpty {
            // A row the commit changed and its delete rules then deleted (in the writer) is deleted.
            let gone = Set(deleted.map(\.id))
            updated.removeAll { gone.contains($0.id) }
            position = Dictionary(uniqueKeysWithValues: updated.indices.map { (updated[$0].id, $0) })
        }
        guard !changes.links.isEmpty else { return }
        let inserted = Set(self.inserted.map(\.id)), deleted = Set(self.deleted.map(\.id))
        for link in changes.links {
            guard let ends = changes.linkEnds[link.key] else { continue }
            for (id, key, entity) in [(ends.source, ends.sourceKey, ends.sourceEntity), (ends.target, ends.targetKey, ends.targetEntity)] {
                guard let key, !inserted.contains(id), !deleted.contains(id) else { continue }
                if let index = position[id] {
                    updated[index].keys.insert(key)
                } else {
                    position[id] = updated.count
                    // Its own entity when the context knew the object; otherwise its root's.
                    updated.append((id, entity ?? id.rootEntity, [key]))
                }
            }
        }
    }

    package var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }

    /// The summary as history entries, for a store to write.
    package var historyChanges: [HistoryChange] {
        inserted.map { HistoryChange(kind: .insert, objectID: $0.id, entityName: $0.entity.name, changedKeys: []) }
            + updated.map { HistoryChange(kind: .update, objectID: $0.id, entityName: $0.entity.name, changedKeys: $0.keys) }
            + deleted.map { HistoryChange(kind: .delete, objectID: $0.id, entityName: $0.entity.name, changedKeys: []) }
    }
}

/// A commit another process or machine made, as a store's history watcher found it: the
/// history record, and the change set that brings a main context's objects to the values
/// stored now (read with this process's queued commits on top).
package struct RemoteTransaction: Sendable {
    package let transaction: HistoryTransaction
    package let changes: ChangeSet

    package init(transaction: HistoryTransaction, changes: ChangeSet) {
        self.transaction = transaction
        self.changes = changes
    }
}

// MARK: - Encoding history rows

/// How a transaction's changes are stored, the same on every store: in one blob of its one
/// history row, grouped by kind, entity and set of changed keys, each group's primary keys
/// packed together — a commit of 100,000 inserts writes one history row, and a one-object
/// commit adds one row to one table.
///
/// The blob: a format byte (1), then per group, in the order of kind (insert, update,
/// delete), entity name and changed keys: the kind (one byte: 0, 1, 2), the entity's name and
/// the changed keys joined by commas (each a 4-byte length and UTF-8), the number of objects
/// (4 bytes) and their primary keys (8 bytes each). Integers are little-endian.
package enum HistoryEncoding {
    struct Group: Hashable {
        let kind: Int64
        let entity: String
        let keys: String
    }

    static let format: UInt8 = 1

    /// The blob that stores `changes`.
    package static func encode(_ changes: [HistoryChange]) -> Data {
        // One change, one group: a one-object commit needs no table of groups to sort (which
        // was most of the 8 k instructions its history row took to encode).
        if changes.count == 1 {
            return encode([(group(of: changes[0]), [changes[0].objectID.primaryKey])])
        }
        var keys: [Group: [Int64]] = [:]
        for change in changes {
            keys[group(of: change), default: []].append(change.objectID.primaryKey)
        }
        let groups = keys.keys.sorted { a, b in
            if a.kind != b.kind { return a.kind < b.kind }
            if a.entity != b.entity { return a.entity.utf8.lexicographicallyPrecedes(b.entity.utf8) }
            return a.keys.utf8.lexicographicallyPrecedes(b.keys.utf8)
        }
        return encode(groups.map { ($0, keys[$0]!) })
    }

    private static func group(of change: HistoryChange) -> Group {
        Group(kind: code(change.kind), entity: change.entityName, keys: change.changedKeys.sorted().joined(separator: ","))
    }

    /// The blob of `groups`, in their order, each with its primary keys.
    private static func encode(_ groups: [(group: Group, primaryKeys: [Int64])]) -> Data {
        var bytes: [UInt8] = [format]
        bytes.reserveCapacity(1 + groups.reduce(0) { $0 + $1.primaryKeys.count } * 8 + groups.count * 48)
        func append(_ integer: UInt32) { withUnsafeBytes(of: integer.littleEndian) { bytes.append(contentsOf: $0) } }
        func append(_ text: String) {
            append(UInt32(text.utf8.count))
            bytes.append(contentsOf: text.utf8)
        }
        for (group, primaryKeys) in groups {
            bytes.append(UInt8(group.kind))
            append(group.entity)
            append(group.keys)
            append(UInt32(primaryKeys.count))
            for key in primaryKeys { withUnsafeBytes(of: UInt64(bitPattern: key).littleEndian) { bytes.append(contentsOf: $0) } }
        }
        return Data(bytes)
    }

    /// The changes a blob stores; a group of an entity the model no longer has is left out.
    /// - Throws: `StoreError(.corrupt)` when the blob is not one `encode` made.
    package static func decode(_ blob: Data, graph: ModelGraph) throws -> [HistoryChange] {
        try blob.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            var offset = 0
            func fail() -> StoreError { StoreError(.corrupt, "A history row's changes cannot be read (byte \(offset) of \(raw.count)): the history tables were changed by something else than ContextStack.") }
            func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
                guard offset + MemoryLayout<T>.size <= raw.count else { throw fail() }
                defer { offset += MemoryLayout<T>.size }
                return T(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: T.self))
            }
            func text() throws -> String {
                let count = Int(try integer(UInt32.self))
                guard offset + count <= raw.count else { throw fail() }
                defer { offset += count }
                return String(decoding: UnsafeRawBufferPointer(rebasing: raw[offset..<(offset + count)]), as: UTF8.self)
            }
            guard try integer(UInt8.self) == format else { throw fail() }
            var changes: [HistoryChange] = []
            while offset < raw.count {
                guard let kind = kind(Int64(try integer(UInt8.self))) else { throw fail() }
                let entityName = try text()
                let keys = try text()
                let count = Int(try integer(UInt32.self))
                guard offset + count * 8 <= raw.count else { throw fail() }
                // Named as the model names them now: written before a migration, the entity
                // or its properties may have had other names (`originalName`), or be gone (left
                // out: a consumer is never told of a key the entity does not have).
                let entity = graph.entity(namedOrRenamedFrom: entityName)
                let changed = Set(keys.split(separator: ",").compactMap { key -> String? in
                    let key = String(key)
                    guard let entity, entity.property(named: key) == nil else { return key }
                    return entity.properties.first(where: { $0.declared.originalName == key })?.name
                })
                changes.reserveCapacity(changes.count + count)
                for _ in 0..<count {
                    let key = Int64(bitPattern: try integer(UInt64.self))
                    if let entity {
                        changes.append(HistoryChange(kind: kind, objectID: ObjectID(rootEntity: entity.rootDescription, primaryKey: key),
                                                     entityName: entity.name, changedKeys: changed))
                    }
                }
            }
            return changes
        }
    }

    static func code(_ kind: HistoryChange.Kind) -> Int64 {
        switch kind {
        case .insert: 0
        case .update: 1
        case .delete: 2
        }
    }

    static func kind(_ code: Int64) -> HistoryChange.Kind? {
        switch code {
        case 0: .insert
        case 1: .update
        case 2: .delete
        default: nil
        }
    }
}
