//! How the built-in kinds merge, from Kubernetes' own OpenAPI schemas: the
//! `x-kubernetes-list-type`, `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`,
//! `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` extensions of every type, in
//! the table `merge_table.txt`, which `tests/emulator/merge/generate.py` writes from the
//! Kubernetes 1.32 schemas that kubernetes-validate publishes (`make merge-table`; `make
//! merge-table-check` regenerates it and compares).
//!
//! Two readers, as in the API server:
//! - strategic merge patch follows the patch strategy and merge key (the Go struct tags the
//!   extensions mirror): [`Field::patch_merge`], [`Field::patch_replaces`];
//! - server-side apply and managedFields follow the list and map types, as kube-openapi's
//!   `schemaconv` derives them: [`Field::list`], [`Field::atomic`].
//!
//! Custom resources carry the same extensions in their CRD's schema (read in `apply.rs`).

use std::collections::HashMap;
use std::sync::OnceLock;

const TABLE: &str = include_str!("merge_table.txt");

/// What server-side apply does with a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole, owned as one field.
    Atomic,
    /// Items are scalars, each owned on its own.
    Set,
    /// Items are objects identified by these key fields.
    Map(Vec<&'static str>),
}

/// What strategic merge patch does with a list (`patchStrategy:"merge"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchMerge {
    /// A union of primitives.
    Primitive,
    /// Objects merged by this key.
    Key(&'static str),
}

/// A field of a type, with the extensions the schema gives it.
#[derive(Debug, Default)]
pub struct Field {
    /// The type of its value (of its items, for a list; of its values, for a map of
    /// `values`), when that type has anything to say.
    child: Option<&'static str>,
    /// Its value is a map whose values are `child` (not a struct of type `child`).
    values: bool,
    list_type: Option<&'static str>,
    keys: Vec<&'static str>,
    map_type: Option<&'static str>,
    patch_strategy: Option<&'static str>,
    patch_key: Option<&'static str>,
}

/// A type: whether it is replaced whole, and its fields that matter.
#[derive(Debug, Default)]
pub struct Type {
    atomic: bool,
    fields: HashMap<&'static str, Field>,
}

struct Table {
    kinds: HashMap<(&'static str, &'static str, &'static str), &'static str>,
    types: HashMap<&'static str, Type>,
}

fn table() -> &'static Table {
    static TABLE_CELL: OnceLock<Table> = OnceLock::new();
    TABLE_CELL.get_or_init(|| parse(TABLE))
}

fn parse(text: &'static str) -> Table {
    let mut kinds = HashMap::new();
    let mut types: HashMap<&'static str, Type> = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut words = line.split(' ');
        match (words.next(), words.next()) {
            (Some("kind"), Some(gvk)) => {
                let mut parts = gvk.splitn(3, '/');
                if let (Some(g), Some(v), Some(k), Some(ty)) =
                    (parts.next(), parts.next(), parts.next(), words.next())
                {
                    kinds.insert((g, v, k), ty);
                }
            }
            (Some("type"), Some(name)) => {
                types.entry(name).or_default().atomic = words.next() == Some("atomic");
            }
            (Some("field"), Some(owner)) => {
                let (Some(name), Some(child)) = (words.next(), words.next()) else {
                    continue;
                };
                let mut field = Field {
                    child: (child != "-").then_some(child),
                    ..Default::default()
                };
                for attr in words {
                    match attr.split_once('=') {
                        Some(("list", v)) => field.list_type = Some(v),
                        Some(("keys", v)) => field.keys = v.split(',').collect(),
                        Some(("map", v)) => field.map_type = Some(v),
                        Some(("patch", v)) => field.patch_strategy = Some(v),
                        Some(("patch-key", v)) => field.patch_key = Some(v),
                        _ if attr == "values" => field.values = true,
                        _ => {}
                    }
                }
                types.entry(owner).or_default().fields.insert(name, field);
            }
            _ => {}
        }
    }
    Table { kinds, types }
}

/// Where in an object a merge is: a value of a known type, the values of a map of a known type,
/// or a value the schemas say nothing more about.
#[derive(Clone, Copy, Debug)]
pub enum Node {
    Untyped,
    Struct(&'static Type),
    Values(&'static Type),
}

/// The field nothing is known about.
static UNKNOWN: Field = Field {
    child: None,
    values: false,
    list_type: None,
    keys: Vec::new(),
    map_type: None,
    patch_strategy: None,
    patch_key: None,
};

impl Node {
    /// The root of a built-in kind (`Untyped` for kinds the schemas do not have).
    pub fn root(group: &str, version: &str, kind: &str) -> Node {
        let t = table();
        t.kinds
            .get(&(group, version, kind))
            .and_then(|name| t.types.get(name))
            .map_or(Node::Untyped, Node::Struct)
    }

    /// The field `name` of a value at this node, and the node of its value (of its items, for
    /// a list).
    pub fn field(self, name: &str) -> (&'static Field, Node) {
        let (field, ty) = match self {
            Node::Untyped => return (&UNKNOWN, Node::Untyped),
            // A key of a map of values: the value is of the map's type.
            Node::Values(ty) => return (&UNKNOWN, Node::Struct(ty)),
            Node::Struct(ty) => match ty.fields.get(name) {
                Some(field) => (field, field.child.and_then(|c| table().types.get(c))),
                None => return (&UNKNOWN, Node::Untyped),
            },
        };
        let node = match ty {
            None => Node::Untyped,
            Some(ty) if field.values => Node::Values(ty),
            Some(ty) => Node::Struct(ty),
        };
        (field, node)
    }

    /// The node at a path of field names (list items left out).
    pub fn at(self, path: &[&str]) -> (&'static Field, Node) {
        let mut current = (&UNKNOWN, self);
        for name in path {
            current = current.1.field(name);
        }
        current
    }

    /// Whether a value of this node is replaced whole (`x-kubernetes-map-type: atomic` on its
    /// type).
    fn atomic_type(self) -> bool {
        matches!(self, Node::Struct(ty) if ty.atomic)
    }
}

impl Field {
    /// Server-side apply's view of this field as a list: `x-kubernetes-list-type` with its
    /// keys; without one, a merging patch strategy makes it a map by the merge key (a set
    /// without key), as kube-openapi's `schemaconv` converts the built-in schemas; else atomic.
    pub fn list(&self) -> ListType {
        match self.list_type {
            Some("map") => ListType::Map(self.keys.clone()),
            Some("set") => ListType::Set,
            Some(_) => ListType::Atomic,
            None => match (self.patch_merges(), self.patch_key) {
                (true, Some(key)) => ListType::Map(vec![key]),
                (true, None) => ListType::Set,
                (false, _) => ListType::Atomic,
            },
        }
    }

    /// Whether server-side apply replaces this map or struct whole (`x-kubernetes-map-type:
    /// atomic` on the field or on its type); `child` is the node of its value.
    pub fn atomic(&self, child: Node) -> bool {
        match self.map_type {
            Some("atomic") => true,
            Some(_) => false,
            None => child.atomic_type(),
        }
    }

    fn patch_merges(&self) -> bool {
        self.patch_strategy
            .is_some_and(|s| s.split(',').any(|s| s == "merge"))
    }

    /// Strategic merge patch's list strategy: `None` replaces the list.
    pub fn patch_merge(&self) -> Option<PatchMerge> {
        if !self.patch_merges() {
            return None;
        }
        Some(match self.patch_key {
            Some(key) => PatchMerge::Key(key),
            None => PatchMerge::Primitive,
        })
    }

    /// Whether strategic merge patch replaces this map whole (`patchStrategy:"replace"`).
    pub fn patch_replaces(&self) -> bool {
        self.patch_strategy
            .is_some_and(|s| s.split(',').any(|s| s == "replace"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(group: &str, version: &str, kind: &str, path: &[&str]) -> (&'static Field, Node) {
        Node::root(group, version, kind).at(path)
    }

    /// Every built-in kind the emulator serves merges by its schema.
    #[test]
    fn the_table_has_the_kinds_the_emulator_serves() {
        let registry = crate::registry::Registry::builtin();
        let mut served = 0;
        for r in registry.all() {
            assert!(
                matches!(Node::root(&r.group, &r.version, &r.kind), Node::Struct(_)),
                "{}/{}/{} is not in the table",
                r.group,
                r.version,
                r.kind
            );
            served += 1;
        }
        assert!(served > 30, "{served} kinds");
        assert!(matches!(
            Node::root("sites.ecmwf.int", "v1", "Site"),
            Node::Untyped
        ));
    }

    /// Rows of what the schemas say, for both readers.
    #[test]
    fn fields_merge_as_the_schemas_say() {
        let svc = |p: &[&str]| at("", "v1", "Service", p);
        let deploy = |p: &[&str]| at("apps", "v1", "Deployment", p);
        let container = ["spec", "template", "spec", "containers"];
        let in_container = |f: &str| {
            let mut p = container.to_vec();
            p.push(f);
            deploy(&p)
        };

        // Service: an atomic selector; ports keyed by port and protocol (SMP: by port).
        let (selector, node) = svc(&["spec", "selector"]);
        assert!(selector.atomic(node));
        assert_eq!(selector.patch_merge(), None);
        let (ports, _) = svc(&["spec", "ports"]);
        assert_eq!(ports.list(), ListType::Map(vec!["port", "protocol"]));
        assert_eq!(ports.patch_merge(), Some(PatchMerge::Key("port")));
        // Labels and annotations merge key by key.
        let (labels, node) = svc(&["metadata", "labels"]);
        assert!(!labels.atomic(node));

        // A LabelSelector is atomic as a type; its matchLabels are inside it.
        let (selector, node) = deploy(&["spec", "selector"]);
        assert!(selector.atomic(node));
        let (containers, _) = deploy(&container);
        assert_eq!(containers.list(), ListType::Map(vec!["name"]));
        let (env, _) = in_container("env");
        assert_eq!(env.list(), ListType::Map(vec!["name"]));
        assert_eq!(env.patch_merge(), Some(PatchMerge::Key("name")));
        let (ports, _) = in_container("ports");
        assert_eq!(
            ports.list(),
            ListType::Map(vec!["containerPort", "protocol"])
        );
        assert_eq!(ports.patch_merge(), Some(PatchMerge::Key("containerPort")));
        let (args, _) = in_container("args");
        assert_eq!(args.list(), ListType::Atomic);
        assert_eq!(args.patch_merge(), None);
        // Node affinity terms are atomic structs.
        let (term, node) = at(
            "",
            "v1",
            "Pod",
            &[
                "spec",
                "affinity",
                "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution",
            ],
        );
        assert!(term.atomic(node));

        // Finalizers: a set for SSA, a union for SMP.
        let (finalizers, _) = deploy(&["metadata", "finalizers"]);
        assert_eq!(finalizers.list(), ListType::Set);
        assert_eq!(finalizers.patch_merge(), Some(PatchMerge::Primitive));
        // Conditions by type; a PodDisruptionBudget's selector replaced by SMP.
        let (conditions, _) = deploy(&["status", "conditions"]);
        assert_eq!(conditions.patch_merge(), Some(PatchMerge::Key("type")));
        let (pdb, _) = at("policy", "v1", "PodDisruptionBudget", &["spec", "selector"]);
        assert!(pdb.patch_replaces());
        // A map of values: a CRD schema's properties are schemas again.
        let (props, _) = at(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            &[
                "spec",
                "versions",
                "schema",
                "openAPIV3Schema",
                "properties",
                "spec",
                "required",
            ],
        );
        assert_eq!(props.list(), ListType::Atomic);
        // Unknown fields know nothing.
        let (unknown, node) = deploy(&["spec", "nothing", "here"]);
        assert_eq!(unknown.list(), ListType::Atomic);
        assert!(matches!(node, Node::Untyped));
    }
}
