#pragma once
/// @file
/// Housekeeping of a checkpoint directory after a crash or a kill during a write.
///
/// nn::atomic_write_file writes `"<dir>/.<name>.tmp.<pid>.<n>"` and renames it; a kill leaves the temp file.
/// Trainer::save_checkpoint writes `<stem>.safetensors`, then `<stem>.json`; a kill between the two leaves an orphan
/// .safetensors (the checkpoint is incomplete and never loaded). cleanup_stale_checkpoint_files removes:
///   * temp files of that exact pattern whose writer pid is not a live process on this machine;
///   * orphan .safetensors files that a Trainer wrote (header metadata "format": "volt-checkpoint") and that
///     have no `<stem>.json` partner.
///   * orphan `<stem>.shards` folders of a sharded checkpoint (no `<stem>.json`) that hold only rank files
///     (`rank-<r>-of-<w>.safetensors`) and temp files.
/// All only when last modified at least `min_age` ago, so a writer on another machine sharing the directory,
/// or a checkpoint whose .json is being written right now, is left alone. Complete checkpoints (with their shard
/// folders), any other file and other subdirectories are never touched. Returns the removed paths. Errors are not fatal: a file
/// that cannot be removed or read is skipped. Call it on rank 0 only.
#include <chrono>
#include <string>
#include <vector>

namespace volt {

std::vector<std::string> cleanup_stale_checkpoint_files(const std::string& dir,
                                                        std::chrono::seconds min_age = std::chrono::seconds(60));

/// Creates `dir` (and parents) and checks that a file can be created in it; a volt::Error naming `what` (e.g.
/// "--out" or "Trainer: default_root_dir"), the path and the reason otherwise.
void ensure_writable_dir(const std::string& dir, const std::string& what);

/// True for `"." + name + ".tmp." + <pid digits> + "." + <digits>` (sets `pid`).
bool is_atomic_write_temp_name(const std::string& filename, long& pid);

/// Paths read from a checkpoint record are untrusted: these decide whether one may be acted on.
///
/// path_lexically_within: `path` names something strictly inside `dir` by its spelling alone ("." and ".."
/// folded, no file system access): "d/a" and "d/x/../a" are within "d"; "d", "d/../e", "/abs" (for a relative
/// "d") are not. Empty `path` or `dir`: false.
bool path_lexically_within(const std::string& path, const std::string& dir);
/// path_resolves_within: the same after resolving symbolic links in every existing part of both paths, so a
/// link inside `dir` that points elsewhere does not count as inside it. The final component is not followed
/// (a link named `path` lies where the link is).
bool path_resolves_within(const std::string& path, const std::string& dir);
/// Whether `a` and `b` name the same directory once resolved (links followed, "." and ".." folded).
bool same_directory(const std::string& a, const std::string& b);

/// True when `<stem>.json` is a regular file (not a link) holding a Volt checkpoint record and
/// `<stem>.safetensors`, when present, is a regular file a Trainer wrote (header metadata
/// "format": "volt-checkpoint"): the files ModelCheckpoint may delete when it rotates its checkpoints.
bool is_volt_checkpoint_pair(const std::string& stem);

}  // namespace volt
