// A restricted unpickler for the data.pkl of a torch.save'd state dict. It interprets only
// the opcodes and globals that pickling a dict of tensors produces and builds plain
// descriptions of the tensors; it never imports, calls or evaluates anything named in the
// file. Anything outside that set is refused with its name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace quiver {

// One tensor of the state dict, as the pickle describes it: a view into a storage record.
struct PickledTensor {
  std::string name;         // the state dict key
  std::string storage_key;  // the storage record is <archive>/data/<storage_key>
  DType dtype = DType::kF32;
  const char* dtype_name = "F32";  // F32 / F16 / BF16, as safetensors spells them
  std::string location;            // "cpu", "cuda:0", ...: where it lived when saved
  uint64_t storage_numel = 0;      // elements of the whole storage
  uint64_t storage_offset = 0;     // in elements
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;  // in elements
};

// Interprets `pickle` (pickle protocol 2 as torch.save writes it; 3-5 are accepted too, as
// torch.save(..., pickle_protocol=N) writes them) as a flat dict of string -> tensor, in
// file order. Supported globals: collections.OrderedDict, torch._utils._rebuild_tensor_v2,
// torch._utils._rebuild_tensor, torch._utils._rebuild_parameter and the storage types
// torch.FloatStorage, torch.HalfStorage, torch.BFloat16Storage.
Result<std::vector<PickledTensor>> unpickle_state_dict(std::string_view pickle);

}  // namespace quiver
