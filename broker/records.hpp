#pragma once

// Conversions between the API's types (broker/commands.hpp) and the disk
// records (storage/schema.hpp). Internal to broker/.

#include "broker/commands.hpp"
#include "storage/schema.hpp"

namespace onceq {

storage::topic_settings to_record(const topic_settings& s);
topic_settings to_api(const storage::topic_settings& s);

}  // namespace onceq
