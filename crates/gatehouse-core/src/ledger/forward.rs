//! A split shard's reserve, forwarded to its children (SPEC §20, `core::ledger::shards`).

use std::collections::BTreeMap;

use super::shards::{id_hash, width, Shard, ShardAnswer};
use crate::events::Reserved;

/// What a split shard answers for the ids it forwarded: one decision per id, in order; the shard
/// that made each (where it is confirmed or released); and the shards the ids passed through,
/// which have split (the isolate learns them all at once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forwarded {
    pub decisions: Vec<Reserved>,
    pub at: Vec<String>,
    pub split: Vec<String>,
}

/// The ids one shard's part of a batch asked, by the shard that decided them.
pub type Placed = Vec<(String, Vec<String>, Vec<String>)>;

impl Forwarded {
    /// A shard's own answer in the same terms: every id decided at `shard`, no split to learn.
    pub fn decided_at(shard: &str, decisions: Vec<Reserved>) -> Forwarded {
        Forwarded { at: vec![shard.to_owned(); decisions.len()], decisions, split: Vec::new() }
    }

    /// `ids` (the ids asked, in order) by the shard that decided each, in name order: that shard,
    /// the ids asked there (released there on a failure) and those it reserved fresh (confirmed
    /// there).
    pub fn placed(&self, ids: &[String]) -> Placed {
        let mut by_decider: BTreeMap<&str, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for ((id, decision), at) in ids.iter().zip(&self.decisions).zip(&self.at) {
            let (asked, fresh) = by_decider.entry(at).or_default();
            if *decision == Reserved::Fresh {
                fresh.push(id.clone());
            }
            asked.push(id.clone());
        }
        by_decider.into_iter().map(|(at, (asked, fresh))| (at.to_owned(), asked, fresh)).collect()
    }
}

/// A split shard's reserve, forwarded (SPEC §20, found in a split storm: an isolate that learns a
/// tree level by level made one round of calls per level, up to 234 object calls and 14 s for a
/// batch, and 503s): each id goes to the child that holds it — at most two children, side by side
/// — which decides or forwards in turn. A batch then costs the worker one call per shard it
/// knows, whatever the depth of the tree below; the forwarding costs object-to-object hops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardTo {
    /// The shard forwarding.
    pub name: String,
    pub children: Vec<ChildReserve>,
}

/// One child's part of a forwarded reserve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildReserve {
    pub name: String,
    /// Its ancestors, nearest first (the forwarding shard, then the forwarding shard's).
    pub ancestors: Vec<String>,
    pub ids: Vec<String>,
    /// Where its ids are in the forwarded reserve.
    positions: Vec<usize>,
}

impl ForwardTo {
    /// How the shard at `level` of `namespace`, with `ancestors`, forwards `ids` (`None`: at the
    /// deepest level, which never splits, or no ids).
    pub fn plan(namespace: &str, level: u8, ancestors: &[String], ids: &[String]) -> Option<ForwardTo> {
        let me = Shard { level, index: id_hash(ids.first()?) % width(level) };
        let name = me.name(namespace);
        let mut lineage = vec![name.clone()];
        lineage.extend(ancestors.iter().cloned());
        let mut children: Vec<ChildReserve> = Vec::new();
        for (position, id) in ids.iter().enumerate() {
            let child = me.child(id_hash(id))?.name(namespace);
            match children.iter_mut().find(|c| c.name == child) {
                Some(c) => {
                    c.ids.push(id.clone());
                    c.positions.push(position);
                }
                None => children.push(ChildReserve {
                    name: child,
                    ancestors: lineage.clone(),
                    ids: vec![id.clone()],
                    positions: vec![position],
                }),
            }
        }
        Some(ForwardTo { name, children })
    }

    /// The answer from the children's (in the order of [`ForwardTo::children`]): `Moved` when one
    /// answered it (an older version: the caller learns the split and goes on as before); an
    /// error when one answered for other ids than it was asked.
    pub fn answer(&self, answers: Vec<ShardAnswer>) -> Result<ShardAnswer, String> {
        if answers.len() != self.children.len() {
            return Err(format!("{} of {} children answered", answers.len(), self.children.len()));
        }
        let n = self.children.iter().map(|c| c.ids.len()).sum();
        let mut decisions = vec![Reserved::InFlight; n];
        let mut at = vec![String::new(); n];
        let mut split = vec![self.name.clone()];
        for (child, answer) in self.children.iter().zip(answers) {
            let (decided, deciders) = match answer {
                ShardAnswer::Moved => return Ok(ShardAnswer::Moved),
                ShardAnswer::Decided(d) => (d, vec![child.name.clone(); child.ids.len()]),
                ShardAnswer::Forwarded(f) => {
                    split.extend(f.split);
                    (f.decisions, f.at)
                }
            };
            if decided.len() != child.ids.len() || deciders.len() != child.ids.len() {
                return Err(format!("{} answered {} of {} ids", child.name, decided.len(), child.ids.len()));
            }
            for ((&position, d), by) in child.positions.iter().zip(decided).zip(deciders) {
                decisions[position] = d;
                at[position] = by;
            }
        }
        Ok(ShardAnswer::Forwarded(Forwarded { decisions, at, split }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_shard_forwards_each_id_to_its_child_and_answers_in_order() {
        let ids: Vec<String> = (0..40).map(|n| format!("evt_{n}")).collect();
        // The level-1 shard of evt_0, with the ids of that shard only.
        let mine: Vec<String> =
            ids.iter().filter(|id| id_hash(id) % width(1) == id_hash(&ids[0]) % width(1)).cloned().collect();
        let plan = ForwardTo::plan("ns", 1, &["ns:0".to_owned()], &mine).unwrap();
        assert_eq!(plan.name, format!("ns:L1:{}", id_hash(&ids[0]) % 8));
        assert!(plan.children.len() <= 2, "linear hashing: two children");
        for child in &plan.children {
            assert_eq!(child.ancestors, vec![plan.name.clone(), "ns:0".to_owned()]);
            for id in &child.ids {
                assert_eq!(child.name, format!("ns:L2:{}", id_hash(id) % 16));
            }
        }
        assert_eq!(
            ForwardTo::plan("ns", super::super::shards::MAX_LEVEL, &[], &mine),
            None,
            "the deepest level"
        );
        // The first child decided; the second forwarded again, one level further.
        let answers: Vec<ShardAnswer> = plan
            .children
            .iter()
            .enumerate()
            .map(|(i, c)| match i {
                0 => ShardAnswer::Decided(vec![Reserved::Fresh; c.ids.len()]),
                _ => ShardAnswer::Forwarded(Forwarded {
                    decisions: vec![Reserved::Duplicate; c.ids.len()],
                    at: vec!["ns:L3:1".into(); c.ids.len()],
                    split: vec![c.name.clone()],
                }),
            })
            .collect();
        let ShardAnswer::Forwarded(f) = plan.answer(answers).unwrap() else { panic!("forwarded") };
        for (id, (d, at)) in mine.iter().zip(f.decisions.iter().zip(&f.at)) {
            let child = plan.children.iter().position(|c| c.ids.contains(id)).unwrap();
            assert_eq!(
                (*d, at.as_str()),
                match child {
                    0 => (Reserved::Fresh, plan.children[0].name.as_str()),
                    _ => (Reserved::Duplicate, "ns:L3:1"),
                }
            );
        }
        assert_eq!(f.split[0], plan.name);
        // A child of an older version, or one that answers for other ids.
        let moved = plan.children.iter().map(|_| ShardAnswer::Moved).collect();
        assert_eq!(plan.answer(moved), Ok(ShardAnswer::Moved));
        let short = plan.children.iter().map(|_| ShardAnswer::Decided(vec![])).collect();
        assert!(plan.answer(short).is_err());
        assert!(plan.answer(Vec::new()).is_err());
    }
}
