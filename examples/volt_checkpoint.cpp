// volt_checkpoint: checkpoint utilities that need no model.
//
//   build/examples/volt_checkpoint consolidate IN OUT
//
// consolidate: reads the sharded checkpoint IN (IN.json, IN.safetensors and IN.shards/, written with
// --checkpoint-layout sharded under zero1/zero2) and writes OUT.safetensors and OUT.json, the full checkpoint
// the same run would have written with --checkpoint-layout full. IN and OUT are stems (a trailing
// .json/.safetensors is dropped). Exits 1 with the error on stderr when IN is incomplete, corrupt or
// inconsistent with its record.
#include <iostream>
#include <string>

#include <volt/runtime/error.h>
#include <volt/trainer/checkpoint/sharded.h>

namespace {

std::string stem_of(std::string path) {
  for (const std::string ext : {".safetensors", ".json"})
    if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
      return path.substr(0, path.size() - ext.size());
  return path;
}

int usage() {
  std::cerr << "usage: volt_checkpoint consolidate IN OUT\n"
               "  writes OUT.safetensors and OUT.json: the full checkpoint of the sharded checkpoint IN\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::string(argv[1]) != "consolidate") return usage();
  const std::string in = stem_of(argv[2]), out = stem_of(argv[3]);
  try {
    volt::consolidate_checkpoint(in, out);
  } catch (const std::exception& e) {
    std::cerr << "volt_checkpoint: " << e.what() << "\n";
    return 1;
  }
  std::cout << "wrote " << out << ".safetensors and " << out << ".json\n";
  return 0;
}
