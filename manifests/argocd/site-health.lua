-- Argo CD health check for sites.ecmwf.int/Site, from the status sites-operator writes.
--
-- Install it as the argocd-cm key `resource.customizations.health.sites.ecmwf.int_Site`
-- (docs/operations.md, "Using Sites with GitOps"). It reads the conditions of SPEC 4.4/4.7:
--   Healthy     Ready True: the site is available and up to date at its generation
--   Suspended   Paused True: the site is paused (sites.ecmwf.int/paused), the operator writes
--               nothing for it; or Ready True with reason Disabled: the site is archived (scaled
--               to zero on purpose)
--   Degraded    Stalled True (a terminal error: an invalid Site, a refused request), an object or
--               path conflict that someone has to resolve, pods the StatefulSet cannot create
--               (FailedCreate), a failed pod, or a container that crash-loops or cannot pull
--               its image
--   Progressing anything else: the operator has not reported on this generation yet, or is
--               still working (Reconciling True)
local hs = {
  status = "Progressing",
  message = "Waiting for sites-operator to report the status of the site",
}
local status = obj.status
if status == nil or status.conditions == nil then
  return hs
end
local conditions = {}
for _, condition in ipairs(status.conditions) do
  conditions[condition.type] = condition
end
local function holds(type_)
  local condition = conditions[type_]
  return condition ~= nil and condition.status == "True"
end
local function describe(condition)
  local text = condition.reason or ""
  if condition.message ~= nil and condition.message ~= "" then
    text = text .. ": " .. condition.message
  end
  return text
end

-- Paused: the operator observes no generation until it is resumed.
if holds("Paused") then
  hs.status = "Suspended"
  hs.message = describe(conditions.Paused)
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.message = "Waiting for sites-operator to observe generation " .. tostring(generation)
  return hs
end

if holds("Stalled") then
  hs.status = "Degraded"
  hs.message = describe(conditions.Stalled)
  return hs
end
if holds("Ready") then
  if conditions.Ready.reason == "Disabled" then
    hs.status = "Suspended"
  else
    hs.status = "Healthy"
  end
  hs.message = describe(conditions.Ready)
  return hs
end

-- Not ready. What only a person can resolve is Degraded; the rest is work in progress.
local progressing = conditions.Progressing
local needs_a_person = {
  -- the StatefulSet cannot create the pods (a missing PriorityClass, a quota, a policy)
  FailedCreate = true,
  ObjectConflict = true,
  PathConflict = true,
  RouteConflict = true,
}
if progressing ~= nil and needs_a_person[progressing.reason] then
  hs.status = "Degraded"
  hs.message = describe(progressing)
  return hs
end
if status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = "The site pods failed"
  return hs
end
local broken = {
  CrashLoopBackOff = true,
  ImagePullBackOff = true,
  ErrImagePull = true,
  InvalidImageName = true,
  CreateContainerConfigError = true,
}
if status.problems ~= nil then
  for _, problem in ipairs(status.problems) do
    if problem.reason ~= nil and broken[problem.reason] then
      hs.status = "Degraded"
      hs.message = "Container " .. problem.name .. ": " .. problem.reason
      if problem.message ~= nil and problem.message ~= "" then
        hs.message = hs.message .. ": " .. problem.message
      end
      return hs
    end
  end
end
local reconciling = conditions.Reconciling or progressing
if reconciling ~= nil then
  hs.message = describe(reconciling)
end
return hs
