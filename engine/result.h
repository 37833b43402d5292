#pragma once
// Result<T> lives in probes/ (the bottom layer) so every layer can return errors as values.
#include "base/result.h"
